// shardscope report TRACE [--json]: the metrics of a trace (any form: binary,
// native JSON, or a PyTorch profiler / Kineto JSON file).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "traces/metrics.h"
#include "traces/trace_io.h"

namespace shardscope::cli {

namespace {

constexpr const char* kUsage =
    "usage: shardscope report TRACE [--json]\n\n"
    "Metrics of a trace: step time, peak allocated/reserved memory, compute,\n"
    "communication, exposed communication, overlap and idle time, per rank and\n"
    "overall, with per-unit and per-op-type breakdowns (docs/traces.md).\n"
    "TRACE: a shardscope trace (binary or .json) or a PyTorch profiler JSON.\n\n"
    "  --json   print the metrics JSON (ARCHITECTURE.md, output contracts)\n";

}  // namespace

int cmd_report(int argc, char** argv) {
  Args args(argc, argv, {{"json", false, false}}, true);
  if (args.help()) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (args.positionals().size() != 1) throw UsageError("expected exactly one TRACE");
  const std::string& path = args.positionals()[0];
  const traces::Trace trace = traces::load_trace(path);
  const traces::Metrics metrics = traces::compute_metrics(trace);
  if (args.has("json")) {
    std::printf("%s\n", traces::metrics_to_json(metrics).dump(2).c_str());
  } else {
    std::printf("trace %s: %zu events\n%s", path.c_str(), trace.event_count(),
                traces::format_metrics(metrics).c_str());
  }
  return 0;
}

}  // namespace shardscope::cli
