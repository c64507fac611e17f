// shardscope export TRACE --chrome OUT [--per-rank]: Chrome / Perfetto /
// Kineto-compatible JSON (opens in ui.perfetto.dev, chrome://tracing,
// TensorBoard and Holistic Trace Analysis).
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output_flags.h"
#include "traces/chrome_export.h"
#include "traces/trace_io.h"

namespace shardscope::cli {

namespace {

constexpr const char* kUsage =
    "usage: shardscope export TRACE --chrome OUT [--per-rank]\n\n"
    "Writes TRACE as a Chrome trace JSON that is also Kineto-compatible: one\n"
    "process per rank, one thread per stream, memory counters, flows, ProfilerStep#N.\n\n"
    "  --chrome OUT   output file (all ranks in one file; gzip when it ends in .gz),\n"
    "                 or with --per-rank a folder (created when missing) receiving\n"
    "                 OUT/rank<N>.json\n"
    "  --per-rank     one file per rank, each with its own distributedInfo.rank\n";

}  // namespace

int cmd_export(int argc, char** argv) {
  Args args(argc, argv, {{"chrome", true, false}, {"per-rank", false, false}}, true);
  if (args.help()) {
    std::printf("%s", kUsage);
    return 0;
  }
  // --per-rank: --chrome is a folder; each rank file is checked as it is opened.
  if (!args.has("per-rank")) check_output_flag(args, "chrome");
  if (args.positionals().size() != 1) throw UsageError("expected exactly one TRACE");
  const std::string out = args.require("chrome");
  const traces::Trace trace = traces::load_trace(args.positionals()[0]);
  if (args.has("per-rank")) {
    const auto paths = traces::export_chrome_per_rank(trace, out);
    for (const std::string& p : paths) std::printf("wrote %s\n", p.c_str());
  } else {
    traces::export_chrome(trace, out);
    std::printf("wrote %s (%zu ranks, %zu events)\n", out.c_str(), trace.ranks.size(),
                trace.event_count());
  }
  return 0;
}

}  // namespace shardscope::cli
