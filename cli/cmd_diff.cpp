// shardscope diff TRACE_A TRACE_B [--json]: metric deltas of B against A.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "traces/diff.h"
#include "traces/metrics.h"
#include "traces/trace_io.h"

namespace shardscope::cli {

namespace {

constexpr const char* kUsage =
    "usage: shardscope diff TRACE_A TRACE_B [--json]\n\n"
    "Metric deltas of B against A (absolute and relative, largest first), per rank,\n"
    "and per unit / op type / category breakdown deltas. Traces in any form\n"
    "(binary, .json, PyTorch profiler JSON): compare measured with predicted.\n\n"
    "  --json   print the deltas as JSON\n";

}  // namespace

int cmd_diff(int argc, char** argv) {
  Args args(argc, argv, {{"json", false, false}}, true);
  if (args.help()) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (args.positionals().size() != 2) throw UsageError("expected TRACE_A and TRACE_B");
  const std::string& path_a = args.positionals()[0];
  const std::string& path_b = args.positionals()[1];
  const traces::Metrics a = traces::compute_metrics(traces::load_trace(path_a));
  const traces::Metrics b = traces::compute_metrics(traces::load_trace(path_b));
  const traces::MetricsDiff d = traces::diff_metrics(a, b);
  if (args.has("json")) {
    nlohmann::json j = traces::diff_to_json(d);
    j["a"] = {{"path", path_a}, {"source", traces::source_name(a.source)}};
    j["b"] = {{"path", path_b}, {"source", traces::source_name(b.source)}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("A: %s (%s)\nB: %s (%s)\n\n%s", path_a.c_str(), traces::source_name(a.source),
                path_b.c_str(), traces::source_name(b.source), traces::format_diff(d).c_str());
  }
  return 0;
}

}  // namespace shardscope::cli
