#include "traces/diff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

namespace shardscope::traces {

using nlohmann::json;

namespace {

std::vector<std::pair<const char*, double>> fields(const MetricValues& v) {
  return {{"step_time_ms", v.step_time_ms},
          {"peak_allocated_bytes", static_cast<double>(v.peak_allocated_bytes)},
          {"peak_reserved_bytes", static_cast<double>(v.peak_reserved_bytes)},
          {"compute_ms", v.compute_ms},
          {"comm_ms", v.comm_ms},
          {"comm_wait_ms", v.comm_wait_ms},
          {"comm_transfer_ms", v.comm_transfer_ms},
          {"exposed_comm_ms", v.exposed_comm_ms},
          {"overlap", v.overlap},
          {"idle_ms", v.idle_ms}};
}

void relative_of(double a, double b, bool* has, double* rel) {
  *has = a != 0;
  *rel = a != 0 ? (b - a) / std::fabs(a) : 0;
}

std::vector<MetricDelta> deltas(const MetricValues& a, const MetricValues& b) {
  const auto fa = fields(a);
  const auto fb = fields(b);
  std::vector<MetricDelta> out;
  for (size_t i = 0; i < fa.size(); ++i) {
    MetricDelta d;
    d.name = fa[i].first;
    d.a = fa[i].second;
    d.b = fb[i].second;
    d.delta = d.b - d.a;
    relative_of(d.a, d.b, &d.has_relative, &d.relative);
    out.push_back(d);
  }
  return out;
}

// Rank for ordering: a change from zero is the largest, no change the smallest.
double magnitude(bool has_relative, double relative, double delta) {
  if (delta == 0) return -1;
  return has_relative ? std::fabs(relative) : HUGE_VAL;
}

std::vector<RowDelta> row_deltas(const std::vector<BreakdownRow>& a,
                                 const std::vector<BreakdownRow>& b) {
  std::map<std::string, RowDelta> rows;
  for (const BreakdownRow& r : a) {
    RowDelta& d = rows[r.key];
    d.key = r.key;
    d.count_a = r.count;
    d.total_a_ms = r.total_ms;
    d.count_per_step_a = r.count_per_step;
    d.per_step_a_ms = r.per_step_ms - r.wait_per_step_ms;
    d.wait_per_step_a_ms = r.wait_per_step_ms;
  }
  for (const BreakdownRow& r : b) {
    RowDelta& d = rows[r.key];
    d.key = r.key;
    d.count_b = r.count;
    d.total_b_ms = r.total_ms;
    d.count_per_step_b = r.count_per_step;
    d.per_step_b_ms = r.per_step_ms - r.wait_per_step_ms;
    d.wait_per_step_b_ms = r.wait_per_step_ms;
  }
  std::vector<RowDelta> out;
  for (auto& [key, d] : rows) {
    (void)key;
    d.delta_ms = d.per_step_b_ms - d.per_step_a_ms;
    relative_of(d.per_step_a_ms, d.per_step_b_ms, &d.has_relative, &d.relative);
    out.push_back(d);
  }
  std::stable_sort(out.begin(), out.end(), [](const RowDelta& x, const RowDelta& y) {
    return std::fabs(x.delta_ms) > std::fabs(y.delta_ms);
  });
  return out;
}

json rows_json(const std::vector<RowDelta>& rows, int limit) {
  json a = json::array();
  for (const RowDelta& r : rows) {
    if (limit >= 0 && a.size() >= static_cast<size_t>(limit)) break;
    a.push_back({{"key", r.key},
                 {"count_a", r.count_a},
                 {"count_b", r.count_b},
                 {"total_a_ms", r.total_a_ms},
                 {"total_b_ms", r.total_b_ms},
                 {"count_per_step_a", r.count_per_step_a},
                 {"count_per_step_b", r.count_per_step_b},
                 {"per_step_a_ms", r.per_step_a_ms},
                 {"per_step_b_ms", r.per_step_b_ms},
                 {"wait_per_step_a_ms", r.wait_per_step_a_ms},
                 {"wait_per_step_b_ms", r.wait_per_step_b_ms},
                 {"delta_ms", r.delta_ms},
                 {"relative", r.has_relative ? json(r.relative) : json(nullptr)}});
  }
  return a;
}

json metric_json(const MetricDelta& d) {
  return {{"name", d.name},
          {"a", d.a},
          {"b", d.b},
          {"delta", d.delta},
          {"relative", d.has_relative ? json(d.relative) : json(nullptr)}};
}

// The "change" column: "=" when both sides are 0 (nothing changed; the
// relative change 0 / 0 is undefined), "new" from 0 to a nonzero value.
std::string relative_text(double a, double b, bool has, double rel) {
  if (a == 0 && b == 0) return "=";
  if (!has) return "new";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", rel * 100);
  return buf;
}

}  // namespace

MetricsDiff diff_metrics(const Metrics& a, const Metrics& b) {
  MetricsDiff d;
  d.metrics = deltas(a.total, b.total);
  std::stable_sort(d.metrics.begin(), d.metrics.end(),
                   [](const MetricDelta& x, const MetricDelta& y) {
                     return magnitude(x.has_relative, x.relative, x.delta) >
                            magnitude(y.has_relative, y.relative, y.delta);
                   });
  // Rank ids of A (a simulated rank stands for the ranks it represents),
  // each against the rank of B that is or represents it.
  std::map<int32_t, const RankMetrics*> ids_a, ids_b;
  for (const auto& [m, ids] : {std::pair{&a, &ids_a}, std::pair{&b, &ids_b}})
    for (const RankMetrics& r : m->ranks) {
      if (r.represents.empty()) (*ids)[r.rank] = &r;
      for (const int32_t id : r.represents) (*ids)[id] = &r;
    }
  for (const auto& [id, ra] : ids_a) {
    const auto rb = ids_b.find(id);
    if (rb != ids_b.end()) d.ranks.emplace_back(id, deltas(*ra, *rb->second));
  }
  d.rank_steps_a = a.rank_steps;
  d.rank_steps_b = b.rank_steps;
  d.by_unit = row_deltas(a.by_unit, b.by_unit);
  d.by_op = row_deltas(a.by_op, b.by_op);
  d.by_category = row_deltas(a.by_category, b.by_category);
  return d;
}

json diff_to_json(const MetricsDiff& d, int rows) {
  json j = json::object();
  json metrics = json::array();
  for (const MetricDelta& m : d.metrics) metrics.push_back(metric_json(m));
  j["metrics"] = std::move(metrics);
  json ranks = json::array();
  for (const auto& [rank, list] : d.ranks) {
    json r = {{"rank", rank}, {"metrics", json::array()}};
    for (const MetricDelta& m : list) r["metrics"].push_back(metric_json(m));
    ranks.push_back(std::move(r));
  }
  j["ranks"] = std::move(ranks);
  j["rank_steps_a"] = d.rank_steps_a;
  j["rank_steps_b"] = d.rank_steps_b;
  j["by_unit"] = rows_json(d.by_unit, rows);
  j["by_op"] = rows_json(d.by_op, rows);
  j["by_category"] = rows_json(d.by_category, rows);
  return j;
}

std::string format_diff(const MetricsDiff& d, int rows) {
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-22s %16s %16s %16s %9s\n", "metric (B vs A)", "A", "B", "B - A",
                "change");
  out += buf;
  for (const MetricDelta& m : d.metrics) {
    std::snprintf(buf, sizeof buf, "%-22s %16.4f %16.4f %+16.4f %9s\n", m.name.c_str(), m.a, m.b,
                  m.delta, relative_text(m.a, m.b, m.has_relative, m.relative).c_str());
    out += buf;
  }
  auto table = [&](const char* title, const std::vector<RowDelta>& list) {
    if (list.empty()) return;
    std::snprintf(buf, sizeof buf, "\n%-40s %8s %8s %12s %10s %12s %10s %12s %9s\n", title,
                  "n/step A", "n/step B", "A ms/step", "A wait", "B ms/step", "B wait", "B - A ms",
                  "change");
    out += buf;
    int shown = 0;
    for (const RowDelta& r : list) {
      if (rows >= 0 && shown++ >= rows) break;
      const std::string key = r.key.size() > 40 ? r.key.substr(0, 37) + "..." : r.key;
      std::snprintf(
          buf, sizeof buf, "%-40s %8.2f %8.2f %12.4f %10.4f %12.4f %10.4f %+12.4f %9s\n",
          key.c_str(), r.count_per_step_a, r.count_per_step_b, r.per_step_a_ms,
          r.wait_per_step_a_ms, r.per_step_b_ms, r.wait_per_step_b_ms, r.delta_ms,
          relative_text(r.per_step_a_ms, r.per_step_b_ms, r.has_relative, r.relative).c_str());
      out += buf;
    }
  };
  if (!d.by_unit.empty() || !d.by_op.empty() || !d.by_category.empty()) {
    std::snprintf(buf, sizeof buf,
                  "\nbreakdowns per step and rank (A: %g rank-steps, B: %g; a simulated rank "
                  "counts for the ranks it represents); ms/step leaves out the time collectives "
                  "waited for their last rank, shown as wait\n",
                  d.rank_steps_a, d.rank_steps_b);
    out += buf;
  }
  table("by unit", d.by_unit);
  table("by op type", d.by_op);
  table("by category", d.by_category);
  return out;
}

}  // namespace shardscope::traces
