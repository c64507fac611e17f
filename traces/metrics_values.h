// Per-window values of a trace's metrics and what turns them into the
// reported figures (internal to traces/: metrics.cpp's accumulator and its
// finish()): medians over windows, aggregation over ranks weighted by the ranks
// each stands for, breakdown rows, and the notes a Metrics carries.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "traces/metrics.h"

namespace shardscope::traces::detail {

// One window's values in ns / bytes (doubles: medians may fall between two).
struct Values {
  double step_ns = 0;
  double peak_allocated = 0;
  double peak_reserved = 0;
  double compute_ns = 0;
  double comm_ns = 0;
  double exposed_ns = 0;
  double overlap = 0;
  double idle_ns = 0;
  double device_span_ns = 0;
  double non_compute_ns = 0;
  double lag_ns = 0;
  double wait_ns = 0;
  double transfer_ns = 0;
};

// The median of each value over the windows (0 for none).
Values median(const std::vector<Values>& v);
// The per-rank values, each weighted by the ranks its rank represents.
Values aggregate(const std::vector<std::pair<Values, double>>& per_rank);
int64_t to_bytes(double x);
void to_metric_values(const Values& v, MetricValues* out);

// Unsigned: sums of extreme durations wrap instead of overflowing.
struct RowAcc {
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t self_ns = 0;
  // The same, each event weighted by the ranks its rank represents.
  double weighted_count = 0;
  double weighted_ns = 0;
  double weighted_self_ns = 0;
  double weighted_wait_ns = 0;
};

std::vector<BreakdownRow> to_rows(const std::map<std::string, RowAcc>& acc, double rank_steps);
std::string step_list(const std::vector<int64_t>& v);
std::string steps_note(const RankMetrics& r);
void add_notes(Metrics& m);

}  // namespace shardscope::traces::detail
