// Imports PyTorch profiler (Kineto) Chrome traces, one file per rank (or
// shardscope's own combined export, one process per rank), into the trace
// model (mapping: docs/traces.md, "Kineto import"):
//   device: kernels (CUDA, ROCm; NCCL/RCCL kernels as collectives), memcpy,
//     memset, stream syncs, MTIA device events, each on its stream's lane;
//   host: cpu_op, user_annotation, cuda_runtime / cuda_driver /
//     mtia_runtime calls on host lanes (category host; gloo collectives as
//     comm.*), linked to the device work they launched by correlation id
//     (flows) and, through the launching operator's record_shapes input
//     dims, FLOPs and bytes on the kernels;
//   ProfilerStep#N ranges as steps, "[memory]" instants of the rank's device
//   as memory records, the rank from distributedInfo.
// Times are integer nanoseconds read exactly from the decimal text. Input
// may be gzip-compressed (read_file inflates it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "traces/input.h"
#include "traces/trace.h"

namespace shardscope::traces {

// What an import did, for people (`shardscope import` prints it).
struct KinetoImportSummary {
  int64_t device_events = 0;  // device work (not counting gpu_user_annotation ranges)
  int64_t host_events = 0;
  int64_t launch_links = 0;        // device events linked to the host call that launched them
  int64_t unlinked_device = 0;     // device events with no launching host call in the file
  int64_t kernels_with_flops = 0;  // kernels given FLOPs from their operator's input dims
  int64_t memory_records = 0;
  std::map<std::string, int64_t> skipped;  // Kineto cat -> complete events not imported
  // The most bytes of JSON text held at once by one file's reader: the
  // whole text when it was given whole, else the largest window of the
  // stream (a chunk and the event it ends in).
  uint64_t text_window_bytes = 0;
};

// "python_function 12, Trace 1": categories and counts of what was not imported.
std::string describe_skipped(const std::map<std::string, int64_t>& skipped);

// Each file is one rank (distributedInfo.rank, else its position in `paths`),
// except shardscope's combined exports, which hold one rank per process.
// Throws TraceError naming the file and the position (byte offset or JSON
// path such as /traceEvents/12/ts).
// Files are imported in parallel, `threads` at a time (0 = the hardware's
// threads; at most one per file). Each is parsed as a stream (gzip
// inflated as it goes): memory follows the events kept, plus a window of
// about a MiB of text per file being read.
Trace import_kineto(const std::vector<std::string>& paths, KinetoImportSummary* summary = nullptr,
                    int threads = 0);

// One Kineto document already in memory (uncompressed).
Trace import_kineto_text(std::string_view text, const std::string& name = "kineto.json",
                         KinetoImportSummary* summary = nullptr);

// One Kineto document streamed from `source` (JsonScanner::Source: appends
// up to n bytes, 0 at the end), after the bytes in `head`.
Trace import_kineto_source(std::function<size_t(std::string& out, size_t n)> source,
                           std::string head, const std::string& name,
                           KinetoImportSummary* summary = nullptr);

// One Kineto file, streamed from `in` (`head`: bytes already read from it;
// load_trace reads one chunk to tell formats apart). Each chunk passes the
// JSON guard of `limits` as it is read (traces/input.h, json_text_source).
Trace import_kineto_stream(InputFile& in, const InputLimits& limits, std::string head = {},
                           KinetoImportSummary* summary = nullptr);

// Adds the rank(s) in `text` to `t` (rank `fallback_rank` when the document
// has no distributedInfo.rank). Returns the world size it names, or 0.
int32_t import_kineto_rank(Trace& t, std::string_view text, const std::string& name,
                           int32_t fallback_rank, KinetoImportSummary* summary = nullptr);
// The same from a file, streamed (as import_kineto_stream).
int32_t import_kineto_rank(Trace& t, InputFile& in, const InputLimits& limits, std::string head,
                           int32_t fallback_rank, KinetoImportSummary* summary = nullptr);

}  // namespace shardscope::traces
