// Metrics as JSON (the output contract) and as a table for people.
#include <cinttypes>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "traces/human_format.h"
#include "traces/metrics.h"

namespace shardscope::traces {

using nlohmann::json;

namespace {

// A time field's value, or null when withheld.
json time_value(double v, TimeFields times) {
  return times == TimeFields::values ? json(v) : json();
}

// `device`: false when the trace has no device events, so the device-side
// times are not measured (null, never a silent 0).
void put_values(const MetricValues& v, TimeFields times, bool device, json& j) {
  const TimeFields device_times = device ? times : TimeFields::withheld;
  j["step_time_ms"] = time_value(v.step_time_ms, times);
  j["peak_allocated_bytes"] = v.peak_allocated_bytes;
  j["peak_reserved_bytes"] = v.peak_reserved_bytes;
  j["compute_ms"] = time_value(v.compute_ms, device_times);
  j["comm_ms"] = time_value(v.comm_ms, times);
  j["exposed_comm_ms"] = time_value(v.exposed_comm_ms, times);
  j["overlap"] = time_value(v.overlap, times);
  j["idle_ms"] = time_value(v.idle_ms, device_times);
  j["device_span_ms"] = time_value(v.device_span_ms, device_times);
  j["non_compute_ms"] = time_value(v.non_compute_ms, device_times);
  j["host_device_lag_ms"] = time_value(v.host_device_lag_ms, device_times);
  j["comm_wait_ms"] = time_value(v.comm_wait_ms, times);
  j["comm_transfer_ms"] = time_value(v.comm_transfer_ms, times);
}

// One step's values: {"step", the values, "reported"}.
json step_json(const StepMetrics& s, TimeFields times, bool device) {
  json e = json::object();
  e["step"] = s.step;
  put_values(s, times, device, e);
  e["reported"] = s.reported;
  return e;
}

json rows_json(const std::vector<BreakdownRow>& rows, int limit, TimeFields times) {
  json a = json::array();
  for (const BreakdownRow& r : rows) {
    if (limit >= 0 && a.size() >= static_cast<size_t>(limit)) break;
    a.push_back({{"key", r.key},
                 {"count", r.count},
                 {"total_ms", time_value(r.total_ms, times)},
                 {"mean_ms", time_value(r.mean_ms, times)},
                 {"self_ms", time_value(r.self_ms, times)},
                 {"count_per_step", r.count_per_step},
                 {"per_step_ms", time_value(r.per_step_ms, times)},
                 {"self_per_step_ms", time_value(r.self_per_step_ms, times)},
                 {"wait_per_step_ms", time_value(r.wait_per_step_ms, times)}});
  }
  return a;
}

std::string ms_cell(double v, bool measured, int width) {
  char buf[64];
  if (measured) {
    std::snprintf(buf, sizeof buf, "%*.3f", width, v);
  } else {
    std::snprintf(buf, sizeof buf, "%*s", width, "-");
  }
  return buf;
}

// `split`: the collectives were matched across ranks, so their wait is measured.
void append_row(std::string& out, const std::string& label, const MetricValues& v, bool device,
                bool split) {
  char buf[320];
  std::snprintf(
      buf, sizeof buf, "%-10s %10.3f %11s %9.3f %9s %11.3f %8.3f %9s %11s %10s %15s %15s\n",
      label.c_str(), v.step_time_ms, ms_cell(v.compute_ms, device, 11).c_str(), v.comm_ms,
      ms_cell(v.comm_wait_ms, split, 9).c_str(), v.exposed_comm_ms, v.overlap,
      ms_cell(v.idle_ms, device, 9).c_str(), ms_cell(v.device_span_ms, device, 11).c_str(),
      ms_cell(v.host_device_lag_ms, device, 10).c_str(),
      human_bytes(static_cast<double>(v.peak_allocated_bytes), ByteUnit::tib).c_str(),
      human_bytes(static_cast<double>(v.peak_reserved_bytes), ByteUnit::tib).c_str());
  out += buf;
}

void append_breakdown(std::string& out, const char* title, const std::vector<BreakdownRow>& rows,
                      int limit) {
  if (rows.empty()) return;
  char buf[512];
  std::snprintf(buf, sizeof buf, "\n%-40s %8s %12s %10s %12s %10s %10s\n", title, "count",
                "total ms", "mean ms", "self ms", "n/step", "ms/step");
  out += buf;
  int shown = 0;
  for (const BreakdownRow& r : rows) {
    if (limit >= 0 && shown++ >= limit) {
      std::snprintf(buf, sizeof buf, "  ... %zu more\n", rows.size() - static_cast<size_t>(limit));
      out += buf;
      break;
    }
    std::string key = r.key.size() > 40 ? r.key.substr(0, 37) + "..." : r.key;
    std::snprintf(buf, sizeof buf, "%-40s %8" PRId64 " %12.3f %10.4f %12.3f %10.2f %10.4f\n",
                  key.c_str(), r.count, r.total_ms, r.mean_ms, r.self_ms, r.count_per_step,
                  r.per_step_ms);
    out += buf;
  }
}

}  // namespace

json metrics_to_json(const Metrics& m, int breakdown_rows, TimeFields times) {
  json j = json::object();
  j["source"] = source_name(m.source);
  j["world_size"] = m.world_size;
  put_values(m.total, times, m.device_measured, j);
  std::string rule;
  for (const RankMetrics& r : m.ranks) {
    const std::string name = step_rule_name(r.rule);
    rule = rule.empty() || rule == name ? name : "mixed";
  }
  j["step_rule"] = rule.empty() ? std::string("markers") : rule;
  json reported = json::array();
  for (const StepMetrics& s : m.steps)
    if (s.reported) reported.push_back(s.step);
  j["reported_steps"] = std::move(reported);
  j["rank_steps"] = m.rank_steps;
  j["comm_split"] = m.comm_split;
  j["notes"] = m.notes;
  json ranks = json::array();
  for (const RankMetrics& r : m.ranks) {
    json e = json::object();
    e["rank"] = r.rank;
    put_values(r, times, m.device_measured, e);
    e["steps"] = r.steps;
    if (!r.represents.empty()) e["represents"] = r.represents;
    json per_step = json::array();
    for (const StepMetrics& s : r.per_step) {
      json v = step_json(s, times, m.device_measured);
      v["device_events"] = s.device_events;
      per_step.push_back(std::move(v));
    }
    e["step_values"] = std::move(per_step);
    ranks.push_back(std::move(e));
  }
  j["ranks"] = std::move(ranks);
  json steps = json::array();
  for (const StepMetrics& s : m.steps) {
    steps.push_back(step_json(s, times, m.device_measured));
  }
  j["steps"] = std::move(steps);
  j["breakdown"] = {{"by_unit", rows_json(m.by_unit, breakdown_rows, times)},
                    {"by_op", rows_json(m.by_op, breakdown_rows, times)},
                    {"by_category", rows_json(m.by_category, breakdown_rows, times)}};
  return j;
}

std::string format_metrics(const Metrics& m, int breakdown_rows) {
  std::string out;
  char buf[256];
  int64_t first = 0, last = 0, reported = 0;
  for (const StepMetrics& s : m.steps) {
    if (!s.reported) continue;
    if (reported++ == 0) first = s.step;
    last = s.step;
  }
  std::snprintf(buf, sizeof buf, "source %s, world size %d, %zu rank(s) in the trace, %zu step(s)",
                source_name(m.source), m.world_size, m.ranks.size(), m.steps.size());
  out += buf;
  if (m.steps.size() > 1) {
    std::snprintf(buf, sizeof buf, "; median over steps %" PRId64 "..%" PRId64, first, last);
    out += buf;
  }
  out += "\n";
  for (const std::string& note : m.notes) out += "note: " + note + "\n";
  out += "\n";
  std::snprintf(buf, sizeof buf, "%-10s %10s %11s %9s %9s %11s %8s %9s %11s %10s %15s %15s\n", "",
                "step ms", "compute ms", "comm ms", "wait ms", "exposed ms", "overlap", "idle ms",
                "device ms", "lag ms", "peak allocated", "peak reserved");
  out += buf;
  append_row(out, "all", m.total, m.device_measured, m.comm_split);
  for (const RankMetrics& r : m.ranks)
    append_row(out, "rank " + std::to_string(r.rank), r, m.device_measured, m.comm_split);
  if (!m.by_unit.empty() || !m.by_op.empty() || !m.by_category.empty()) {
    std::snprintf(buf, sizeof buf,
                  "\nbreakdowns over the reported steps of every rank: count, total and self are "
                  "sums; n/step and ms/step are per step and rank (over %g rank-steps)\n",
                  m.rank_steps);
    out += buf;
  }
  append_breakdown(out, "by unit", m.by_unit, breakdown_rows);
  append_breakdown(out, "by op type", m.by_op, breakdown_rows);
  append_breakdown(out, "by category", m.by_category, breakdown_rows);
  return out;
}

}  // namespace shardscope::traces
