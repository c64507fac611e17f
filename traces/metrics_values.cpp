#include "traces/metrics_values.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace shardscope::traces::detail {

namespace {

template <typename Get>
double median_of(const std::vector<Values>& v, Get get) {
  std::vector<double> x;
  x.reserve(v.size());
  for (const Values& e : v) x.push_back(get(e));
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  if (n == 0) return 0;
  return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

}  // namespace

Values median(const std::vector<Values>& v) {
  Values m;
  m.step_ns = median_of(v, [](const Values& e) { return e.step_ns; });
  m.peak_allocated = median_of(v, [](const Values& e) { return e.peak_allocated; });
  m.peak_reserved = median_of(v, [](const Values& e) { return e.peak_reserved; });
  m.compute_ns = median_of(v, [](const Values& e) { return e.compute_ns; });
  m.comm_ns = median_of(v, [](const Values& e) { return e.comm_ns; });
  m.exposed_ns = median_of(v, [](const Values& e) { return e.exposed_ns; });
  m.overlap = median_of(v, [](const Values& e) { return e.overlap; });
  m.idle_ns = median_of(v, [](const Values& e) { return e.idle_ns; });
  m.device_span_ns = median_of(v, [](const Values& e) { return e.device_span_ns; });
  m.non_compute_ns = median_of(v, [](const Values& e) { return e.non_compute_ns; });
  m.lag_ns = median_of(v, [](const Values& e) { return e.lag_ns; });
  m.wait_ns = median_of(v, [](const Values& e) { return e.wait_ns; });
  m.transfer_ns = median_of(v, [](const Values& e) { return e.transfer_ns; });
  return m;
}

// Max over ranks for step time and peaks, mean weighted by represented ranks
// for the rest.
Values aggregate(const std::vector<std::pair<Values, double>>& per_rank) {
  Values a;
  double weight = 0;
  for (const auto& [v, w] : per_rank) {
    a.step_ns = std::max(a.step_ns, v.step_ns);
    a.peak_allocated = std::max(a.peak_allocated, v.peak_allocated);
    a.peak_reserved = std::max(a.peak_reserved, v.peak_reserved);
    a.compute_ns += w * v.compute_ns;
    a.comm_ns += w * v.comm_ns;
    a.exposed_ns += w * v.exposed_ns;
    a.overlap += w * v.overlap;
    a.idle_ns += w * v.idle_ns;
    a.device_span_ns += w * v.device_span_ns;
    a.non_compute_ns += w * v.non_compute_ns;
    a.lag_ns += w * v.lag_ns;
    a.wait_ns += w * v.wait_ns;
    a.transfer_ns += w * v.transfer_ns;
    weight += w;
  }
  if (weight > 0) {
    a.compute_ns /= weight;
    a.comm_ns /= weight;
    a.exposed_ns /= weight;
    a.overlap /= weight;
    a.idle_ns /= weight;
    a.device_span_ns /= weight;
    a.non_compute_ns /= weight;
    a.lag_ns /= weight;
    a.wait_ns /= weight;
    a.transfer_ns /= weight;
  }
  return a;
}

int64_t to_bytes(double x) {
  if (!(x < 9.2e18)) return INT64_MAX;
  if (!(x > -9.2e18)) return INT64_MIN;
  return std::llround(x);
}

void to_metric_values(const Values& v, MetricValues* out) {
  out->step_time_ms = v.step_ns / 1e6;
  out->peak_allocated_bytes = to_bytes(v.peak_allocated);
  out->peak_reserved_bytes = to_bytes(v.peak_reserved);
  out->compute_ms = v.compute_ns / 1e6;
  out->comm_ms = v.comm_ns / 1e6;
  out->exposed_comm_ms = v.exposed_ns / 1e6;
  out->overlap = v.overlap;
  out->idle_ms = v.idle_ns / 1e6;
  out->device_span_ms = v.device_span_ns / 1e6;
  out->non_compute_ms = v.non_compute_ns / 1e6;
  out->host_device_lag_ms = v.lag_ns / 1e6;
  out->comm_wait_ms = v.wait_ns / 1e6;
  out->comm_transfer_ms = v.transfer_ns / 1e6;
}

std::vector<BreakdownRow> to_rows(const std::map<std::string, RowAcc>& acc, double rank_steps) {
  std::vector<BreakdownRow> rows;
  rows.reserve(acc.size());
  for (const auto& [key, a] : acc) {
    BreakdownRow r;
    r.key = key;
    r.count = static_cast<int64_t>(a.count);
    r.total_ms = static_cast<double>(a.total_ns) / 1e6;
    r.self_ms = static_cast<double>(a.self_ns) / 1e6;
    r.mean_ms = a.count ? r.total_ms / static_cast<double>(a.count) : 0;
    if (rank_steps > 0) {
      r.count_per_step = a.weighted_count / rank_steps;
      r.per_step_ms = a.weighted_ns / rank_steps / 1e6;
      r.self_per_step_ms = a.weighted_self_ns / rank_steps / 1e6;
      r.wait_per_step_ms = a.weighted_wait_ns / rank_steps / 1e6;
    }
    rows.push_back(std::move(r));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const BreakdownRow& a, const BreakdownRow& b) {
    return a.total_ms > b.total_ms;
  });
  return rows;
}

// "3..7", "3", "2, 4..6" for sorted step numbers.
std::string step_list(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(v[i]);
    if (j > i) out += ".." + std::to_string(v[j]);
    i = j + 1;
  }
  return out;
}

// What the reported steps of a rank are and why the others are left out.
std::string steps_note(const RankMetrics& r) {
  std::vector<int64_t> reported;
  for (const StepMetrics& s : r.per_step)
    if (s.reported) reported.push_back(s.step);
  const size_t n = r.per_step.size();
  if (n <= 1) return "";
  const std::string list = step_list(reported);
  const bool one = list.find_first_of(",.") == std::string::npos;
  std::string note = (one ? "step " : "steps ") + list + " reported";
  std::vector<std::string> out;
  const StepMetrics& first = r.per_step.front();
  const StepMetrics& last = r.per_step.back();
  if (!first.reported) out.push_back("step " + std::to_string(first.step) + " (first: warm-up)");
  if (!last.reported)
    out.push_back("step " + std::to_string(last.step) +
                  " (last: the profiler stopped inside it, so its device work is cut off; HTA "
                  "drops it too)");
  if (r.rule == StepRule::launch && n == 2)
    note += " (only one complete step: it is also the first)";
  for (size_t i = 0; i < out.size(); ++i) note += (i ? " and " : "; left out: ") + out[i];
  return note;
}

void add_notes(Metrics& m) {
  bool any_launch = false, any_markers = false;
  int64_t device_events = 0;
  for (const RankMetrics& r : m.ranks) {
    (r.rule == StepRule::launch ? any_launch : any_markers) = true;
    device_events += r.device_events + r.outside_steps_device_events;
  }
  if (any_launch)
    m.notes.push_back(
        "step rule: launch (HTA): a device event belongs to the step of the host call that "
        "launched it");
  if (any_markers)
    m.notes.push_back("step rule: markers: the trace's own step markers (it has no launch links)");
  // Step notes: one line when every rank says the same.
  std::map<std::string, std::vector<int32_t>> by_text;
  for (const RankMetrics& r : m.ranks) {
    const std::string note = steps_note(r);
    if (!note.empty()) by_text[note].push_back(r.rank);
  }
  for (const auto& [text, ranks] : by_text) {
    if (by_text.size() == 1) {
      m.notes.push_back(text);
      continue;
    }
    std::string who = ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i) who += (i ? "," : "") + std::to_string(ranks[i]);
    m.notes.push_back(who + ": " + text);
  }
  for (const RankMetrics& r : m.ranks) {
    if (r.outside_steps_device_events == 0) continue;
    m.notes.push_back(
        "rank " + std::to_string(r.rank) + ": " + std::to_string(r.outside_steps_device_events) +
        (r.rule == StepRule::launch
             ? " device events were launched outside every step (or by no host call in the "
               "trace) and count in no step"
             : " device events start before the first step and count in no step"));
  }
  m.device_measured = device_events > 0;
  if (!m.device_measured)
    m.notes.push_back(
        "no device events (a CPU-only or host-only trace): device span, compute, non-compute "
        "and idle are not measured");
}

}  // namespace shardscope::traces::detail
