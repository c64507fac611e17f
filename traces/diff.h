// Differences between the metrics of two traces (B relative to A), largest
// first: `shardscope diff A B`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "traces/metrics.h"

namespace shardscope::traces {

struct MetricDelta {
  std::string name;  // a key of the metrics contract: "step_time_ms", ...
  double a = 0;
  double b = 0;
  double delta = 0;           // b - a
  bool has_relative = false;  // false when a == 0
  double relative = 0;        // (b - a) / |a|
};

// A breakdown row of both traces. The comparison is per step and rank
// (BreakdownRow::per_step_ms), so traces with different step and rank counts
// compare; the sums are kept for reference.
struct RowDelta {
  std::string key;
  int64_t count_a = 0;  // sums over the reported steps of every rank
  int64_t count_b = 0;
  double total_a_ms = 0;
  double total_b_ms = 0;
  double count_per_step_a = 0;  // per step and rank
  double count_per_step_b = 0;
  // Per step and rank, less the time collectives waited for their last rank
  // (traces/metrics_collectives.h): what the simulator predicts.
  double per_step_a_ms = 0;
  double per_step_b_ms = 0;
  double wait_per_step_a_ms = 0;  // the waiting left out, shown beside
  double wait_per_step_b_ms = 0;
  double delta_ms = 0;  // per_step_b_ms - per_step_a_ms
  bool has_relative = false;
  double relative = 0;  // delta_ms / per_step_a_ms
};

struct MetricsDiff {
  // Ordered by |relative| (a change from 0 counts as largest), then |delta|.
  std::vector<MetricDelta> metrics;
  // Per rank id present in both (itself, or represented by a simulated
  // rank): the same metrics, in contract order.
  std::vector<std::pair<int32_t, std::vector<MetricDelta>>> ranks;
  double rank_steps_a = 0;  // Metrics::rank_steps: the divisors of the rows
  double rank_steps_b = 0;
  // Ordered by |delta_ms|; keys present in either trace.
  std::vector<RowDelta> by_unit;
  std::vector<RowDelta> by_op;
  std::vector<RowDelta> by_category;
};

MetricsDiff diff_metrics(const Metrics& a, const Metrics& b);
// {"metrics": [{"name","a","b","delta","relative"}], "ranks": [...],
//  "rank_steps_a", "rank_steps_b",
//  "by_unit"/"by_op"/"by_category": [{"key","count_a","count_b","total_a_ms","total_b_ms",
//  "count_per_step_a","count_per_step_b","per_step_a_ms","per_step_b_ms",
//  "wait_per_step_a_ms","wait_per_step_b_ms",
//  "delta_ms","relative"}]}; relative is null when a is 0.
nlohmann::json diff_to_json(const MetricsDiff& d, int rows = 50);
std::string format_diff(const MetricsDiff& d, int rows = 15);

}  // namespace shardscope::traces
