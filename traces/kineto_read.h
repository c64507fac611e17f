// First half of the Kineto import: one pass over a PyTorch profiler JSON
// document with JsonScanner, into flat records (no DOM, integer-nanosecond
// times taken exactly from the decimal text). traces/kineto_import.cpp turns
// these records into ranks, lanes, steps, launch links and memory.
//
// The records own everything they keep (strings are interned into the
// trace or copied), so the text can be streamed: read_document on a
// JsonScanner::Source holds one window of the text (a chunk, or one event
// when an event is larger), never the whole document.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "traces/json_scan.h"
#include "traces/trace.h"

namespace shardscope::traces::kineto {

// What a Kineto "cat" is, for the import.
enum class Kind : uint8_t {
  kernel,           // cat kernel: CUDA or ROCm kernels (NCCL/RCCL ones are collectives)
  gpu_memcpy,       // cat gpu_memcpy / memcpy
  gpu_memset,       // cat gpu_memset / memset
  cuda_sync,        // cat cuda_sync: a stream waiting on an event (device side)
  gpu_annotation,   // cat gpu_user_annotation: a host annotation's range on a stream
  mtia_device,      // cat mtia_ccp_events: MTIA device work (DMA or kernels)
  cpu_op,           // cat cpu_op: framework operators (aten::mm, ...)
  user_annotation,  // cat user_annotation: record_function ranges
  runtime,          // cat cuda_runtime (also HIP), mtia_runtime: runtime API calls
  driver,           // cat cuda_driver: driver API calls (cuLaunchKernel)
  skipped,          // any other cat (python_function, Trace, overhead, ...): counted, not imported
};
bool is_device_kind(Kind k);

// What the import needs of one complete ("X") event besides the Event
// itself (Document::events[i] and Document::raw[i] are one event). Kept
// apart so that a single-rank document's events move into the rank without
// a copy. 32 bytes.
struct RawEvent {
  uint64_t correlation = 0;     // args.correlation (the Event keeps its low 32 bits); 0 = none
  int64_t external_id = -1;     // args["External id"]; -1 = none
  size_t offset = 0;            // byte offset of the event in the document (errors)
  uint32_t shapes = kNoShapes;  // index into Document::shapes; kNoShapes = none
  Kind kind = Kind::skipped;
  // A gloo collective on the host ("gloo:all_reduce"): its comm.* category,
  // used when the rank has no device work (CPU-only traces); else host.
  Category host_collective = Category::host;
  static constexpr uint32_t kNoShapes = 0xffffffffu;
};

// Raw JSON text of args["Input Dims"] / ["Input type"] / ["Concrete Inputs"]
// (record_shapes) of one event, parsed only for the ops whose FLOPs are
// derived; empty = absent.
struct RawShapes {
  std::string input_dims;
  std::string input_types;
  std::string concrete_inputs;
};

struct RawLane {
  std::string pid;  // pid and tid as their JSON text
  std::string tid;
  bool device = false;  // holds device events (else host)
  int32_t device_id = -1;
  int32_t stream = -1;
  bool stream_from_args = false;
  int64_t compute = 0, comm = 0, copies = 0, other = 0;
};

struct RawMemory {
  MemoryEvent record;  // time relative to baseTimeNanoseconds
  int32_t device = -1;
  std::string pid;  // for splitting shardscope's combined exports by rank
};

struct RawStep {
  Step step;  // times relative to baseTimeNanoseconds
  std::string pid;
};

// Everything read from one document.
struct Document {
  int64_t base_ns = 0;      // baseTimeNanoseconds (0 when absent)
  int32_t rank = -1;        // distributedInfo.rank, -1 when absent
  int32_t world = 0;        // distributedInfo.world_size, 0 when absent
  std::string backend;      // distributedInfo.backend ("nccl", "gloo", "mtia:hccl,cpu:gloo")
  bool shardscope = false;  // written by shardscope's exporter (top-level "shardscope")
  std::string schema_version;
  std::vector<std::pair<int64_t, std::string>> device_names;  // deviceProperties id -> name
  // Complete events as they go into the rank (start relative to
  // baseTimeNanoseconds, lane = index into `lanes`), and beside each what
  // the import needs of it.
  std::vector<Event> events;
  std::vector<RawEvent> raw;
  std::vector<RawShapes> shapes;  // of the events that have them (RawEvent::shapes)
  std::vector<RawLane> lanes;
  std::vector<RawMemory> memory;
  std::vector<RawStep> steps;
  std::unordered_map<std::string, std::string> thread_names;   // "pid/tid" -> name
  std::unordered_map<std::string, std::string> process_names;  // pid -> name
  std::map<std::string, int64_t> skipped;  // cat -> complete events not imported
  // Correlation ids shardscope's export invented for device work that had
  // none; the importer clears them again.
  std::unordered_set<uint64_t> invented_correlations;
  size_t text_window_peak = 0;  // the most bytes of text held at once (JsonScanner::window_peak)
};

// Reads `text` (one Kineto document). Strings are interned into `t`.
// Throws TraceError naming `file` and a byte offset or JSON path.
Document read_document(std::string_view text, const std::string& file, Trace& t);
// The same document streamed from `source`, after the bytes in `head`:
// the same records and the same errors at the same offsets (offsets count
// from the start of `head`).
Document read_document(JsonScanner::Source source, std::string head, const std::string& file,
                       Trace& t);

}  // namespace shardscope::traces::kineto
