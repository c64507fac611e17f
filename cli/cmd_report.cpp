// shardscope report TRACE [--json]: the metrics of a trace (any form: binary,
// native JSON, or a PyTorch profiler / Kineto JSON file).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "traces/metrics.h"
#include "traces/metrics_collectives.h"
#include "traces/torch_nvtx.h"
#include "traces/trace_io.h"

namespace shardscope::cli {

namespace {

constexpr const char* kUsage =
    "usage: shardscope report TRACE [--json] [--step-rule RULE] [--ranks]\n\n"
    "Metrics of a trace: step time, peak allocated/reserved memory, compute,\n"
    "communication, exposed communication, overlap, idle time and device span\n"
    "(HTA's temporal breakdown), per rank, per step and overall, with per-unit\n"
    "and per-op-type breakdowns (docs/traces.md). Notes say which steps are\n"
    "reported and why others are left out.\n"
    "TRACE: a shardscope trace (binary or .json) or a PyTorch profiler JSON\n"
    "(.json or .json.gz).\n\n"
    "  --json            print the metrics JSON (ARCHITECTURE.md, output contracts)\n"
    "  --step-rule RULE  which step an event belongs to: launch (HTA: a kernel\n"
    "                    belongs to the step of the host call that launched it;\n"
    "                    needs launch links, as profiler traces have), markers\n"
    "                    (the step it starts in), or automatic (default: launch\n"
    "                    when the trace has launch links, else markers)\n"
    "  --ranks           stragglers: collectives matched across ranks (a trace\n"
    "                    holding every rank), per step and rank the wait for the\n"
    "                    last arrival and the transfer, the largest arrival skews,\n"
    "                    the slowest rank and what it was doing (--json: every\n"
    "                    collective under \"collectives\")\n";

}  // namespace

int cmd_report(int argc, char** argv) {
  Args args(argc, argv,
            {{"json", false, false}, {"step-rule", true, false}, {"ranks", false, false}}, true);
  if (args.help()) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (args.positionals().size() != 1) throw UsageError("expected exactly one TRACE");
  const std::string& path = args.positionals()[0];
  traces::MetricsOptions options;
  const std::string rule = args.get("step-rule", "automatic");
  if (rule == "launch") {
    options.step_rule = traces::StepRule::launch;
  } else if (rule == "markers") {
    options.step_rule = traces::StepRule::markers;
  } else if (rule != "automatic") {
    throw UsageError("--step-rule: expected automatic, launch or markers, got \"" + rule + "\"");
  }
  const traces::Trace trace = traces::load_trace(path);
  size_t memory_records = 0;
  for (const traces::RankTrace& r : trace.ranks) memory_records += r.memory.size();
  if (trace.event_count() == 0 && memory_records == 0) {
    std::fprintf(stderr,
                 "shardscope report: %s: nothing to measure: the trace has no events and no "
                 "memory records\n",
                 path.c_str());
    return 2;
  }
  traces::Metrics metrics;
  try {
    metrics = traces::compute_metrics(trace, options);
  } catch (const traces::StepRuleError& e) {
    throw UsageError(std::string("--step-rule: ") + e.what());
  }
  // A CUPTI profile: whether its kernels carry FLOPs (--torch-shapes), and why not.
  for (std::string& note : traces::torch_nvtx_notes(trace))
    metrics.notes.push_back(std::move(note));
  const bool ranks = args.has("ranks");
  if (args.has("json")) {
    nlohmann::json j = traces::metrics_to_json(metrics);
    if (ranks) j["collectives"] = traces::collectives_to_json(traces::match_collectives(trace));
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("trace %s: %zu events\n%s", path.c_str(), trace.event_count(),
                traces::format_metrics(metrics).c_str());
    if (ranks)
      std::printf("\n%s", traces::format_collectives(traces::match_collectives(trace)).c_str());
  }
  return 0;
}

}  // namespace shardscope::cli
