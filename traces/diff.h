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

struct RowDelta {
  std::string key;
  int64_t count_a = 0;
  int64_t count_b = 0;
  double total_a_ms = 0;
  double total_b_ms = 0;
  double delta_ms = 0;
  bool has_relative = false;
  double relative = 0;
};

struct MetricsDiff {
  // Ordered by |relative| (a change from 0 counts as largest), then |delta|.
  std::vector<MetricDelta> metrics;
  // Per rank present in both: the same eight metrics, in contract order.
  std::vector<std::pair<int32_t, std::vector<MetricDelta>>> ranks;
  // Ordered by |delta_ms|; keys present in either trace.
  std::vector<RowDelta> by_unit;
  std::vector<RowDelta> by_op;
  std::vector<RowDelta> by_category;
};

MetricsDiff diff_metrics(const Metrics& a, const Metrics& b);
// {"metrics": [{"name","a","b","delta","relative"}], "ranks": [...],
//  "by_unit"/"by_op"/"by_category": [{"key","count_a","count_b","total_a_ms","total_b_ms",
//  "delta_ms","relative"}]}; relative is null when a is 0.
nlohmann::json diff_to_json(const MetricsDiff& d, int rows = 50);
std::string format_diff(const MetricsDiff& d, int rows = 15);

}  // namespace shardscope::traces
