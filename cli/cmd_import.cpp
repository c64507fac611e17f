// shardscope import --kineto FILE... --out OUT: PyTorch profiler traces (one
// per rank) into a shardscope trace.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "traces/kineto_import.h"
#include "traces/trace_io.h"

namespace shardscope::cli {

namespace {

constexpr const char* kUsage =
    "usage: shardscope import --kineto FILE... --out OUT\n\n"
    "Imports PyTorch profiler (Kineto) JSON traces, one per rank (rank from\n"
    "distributedInfo.rank, else the position on the command line): GPU kernels,\n"
    "NCCL collectives, memcpy/memset, [memory] events and ProfilerStep#N steps.\n\n"
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
  std::vector<std::string> files = args.all("kineto");
  if (files.empty()) throw UsageError("missing --kineto FILE");
  for (const std::string& p : args.positionals()) files.push_back(p);
  const std::string out = args.require("out");
  const traces::Trace trace = traces::import_kineto(files);
  traces::save_trace(trace, out);
  std::printf("wrote %s (%zu ranks, %zu events)\n", out.c_str(), trace.ranks.size(),
              trace.event_count());
  return 0;
}

}  // namespace shardscope::cli
