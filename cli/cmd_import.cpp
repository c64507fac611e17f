// shardscope import --kineto FILE... --out OUT: PyTorch profiler traces (one
// per rank) into a shardscope trace.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output_flags.h"
#include "traces/kineto_import.h"
#include "traces/trace_io.h"

namespace shardscope::cli {

namespace {

constexpr const char* kUsage =
    "usage: shardscope import --kineto FILE... --out OUT\n\n"
    "Imports PyTorch profiler (Kineto) JSON traces, .json or .json.gz, one per\n"
    "rank (rank from distributedInfo.rank, else the position on the command\n"
    "line): device kernels (CUDA, ROCm, MTIA), NCCL collectives, memcpy/memset,\n"
    "host ops and runtime calls linked to the kernels they launched (FLOPs from\n"
    "record_shapes), [memory] events and ProfilerStep#N steps (docs/traces.md).\n\n"
    "  --kineto FILE  a Kineto JSON; more files may follow it (or repeat --kineto)\n"
    "  --out OUT      the trace to write: native JSON when OUT ends in .json,\n"
    "                 else the binary form\n";

}  // namespace

int cmd_import(int argc, char** argv) {
  Args args(argc, argv, {{"kineto", true, true}, {"out", true, false}}, true);
  if (args.help()) {
    std::printf("%s", kUsage);
    return 0;
  }
  check_output_flag(args, "out");
  std::vector<std::string> files = args.all("kineto");
  if (files.empty()) throw UsageError("missing --kineto FILE");
  for (const std::string& p : args.positionals()) files.push_back(p);
  const std::string out = args.require("out");
  traces::KinetoImportSummary summary;
  const traces::Trace trace = traces::import_kineto(files, &summary);
  traces::save_trace(trace, out);
  std::printf("wrote %s (%zu ranks, %zu events)\n", out.c_str(), trace.ranks.size(),
              trace.event_count());
  std::printf(
      "  device events %lld (%lld linked to the host call that launched them, %lld not), host "
      "events %lld, kernels with FLOPs from input shapes %lld, memory records %lld\n",
      static_cast<long long>(summary.device_events), static_cast<long long>(summary.launch_links),
      static_cast<long long>(summary.unlinked_device), static_cast<long long>(summary.host_events),
      static_cast<long long>(summary.kernels_with_flops),
      static_cast<long long>(summary.memory_records));
  if (!summary.skipped.empty())
    std::printf("  not imported (Kineto categories without device or launch work): %s\n",
                traces::describe_skipped(summary.skipped).c_str());
  return 0;
}

}  // namespace shardscope::cli
