#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

#include "sim/calibrate_internal.h"

namespace shardscope::sim::calibrate_detail {

// LaunchReport's deltas of one rank (ns): consecutive host-lane events that
// are both launches (a correlation id), after the warm-up.
void collect_launch_deltas(const traces::RankTrace& r, int64_t warmup_end,
                           std::vector<double>* deltas) {
  std::vector<const traces::Event*> host;
  for (const traces::Event& e : r.events)
    if (e.lane < r.lanes.size() && r.lanes[e.lane].kind == traces::LaneKind::host &&
        e.category != traces::Category::marker)
      host.push_back(&e);
  std::sort(host.begin(), host.end(), [](const traces::Event* a, const traces::Event* b) {
    return a->start_ns < b->start_ns;
  });
  for (size_t i = 1; i < host.size(); ++i) {
    const traces::Event& a = *host[i - 1];
    const traces::Event& b = *host[i];
    if (a.start_ns < warmup_end || a.correlation == 0 || b.correlation == 0 ||
        a.category != traces::Category::host || b.category != traces::Category::host)
      continue;
    deltas->push_back(static_cast<double>(b.start_ns - a.start_ns));
  }
}

// The gaps DispatchReport describes, of one rank, appended to `gaps` (ns).
void collect_dispatch_gaps(const traces::RankTrace& r, int64_t warmup_end, bool engine_source,
                           std::vector<double>* gaps) {
  // When the launch of each device event ended: the host-lane event with
  // its correlation id (a runtime launch call; Kineto's and the engines'
  // traces carry them), else unknown, and an op whose launch is unknown
  // says nothing (the host may have launched it late).
  std::unordered_map<uint32_t, int64_t> launch_by_correlation;
  for (const traces::Event& e : r.events)
    if (e.correlation != 0 && e.lane < r.lanes.size() &&
        r.lanes[e.lane].kind == traces::LaneKind::host)
      launch_by_correlation[e.correlation] = e.start_ns + e.dur_ns;
  // Without launch events: an engine's host runs ahead of its streams (it
  // launches and waits only where the schedule says), so its ops count as
  // launched; any other source's (a simulator's) gaps say nothing.
  if (launch_by_correlation.empty() && !engine_source) return;
  std::vector<int64_t> launch_end(r.events.size(), launch_by_correlation.empty()
                                                       ? std::numeric_limits<int64_t>::min()
                                                       : std::numeric_limits<int64_t>::max());
  for (size_t i = 0; i < r.events.size(); ++i) {
    const traces::Event& e = r.events[i];
    if (e.correlation == 0 || e.lane >= r.lanes.size() ||
        r.lanes[e.lane].kind == traces::LaneKind::host)
      continue;
    const auto it = launch_by_correlation.find(e.correlation);
    if (it != launch_by_correlation.end()) launch_end[i] = it->second;
  }
  const auto device = [&](const traces::Event& e) {
    if (e.lane >= r.lanes.size() || r.lanes[e.lane].kind == traces::LaneKind::host) return false;
    return e.category != traces::Category::marker && e.category != traces::Category::host &&
           e.category != traces::Category::sync;
  };
  // Device events by lane, in start order; every device end, sorted.
  std::map<uint32_t, std::vector<size_t>> by_lane;
  std::vector<std::pair<int64_t, uint32_t>> ends;  // end, lane
  for (size_t i = 0; i < r.events.size(); ++i) {
    const traces::Event& e = r.events[i];
    if (!device(e)) continue;
    by_lane[e.lane].push_back(i);
    ends.emplace_back(e.start_ns + e.dur_ns, e.lane);
  }
  std::sort(ends.begin(), ends.end());
  for (auto& [lane, idx] : by_lane) {
    if (r.lanes[lane].kind == traces::LaneKind::comm) continue;
    std::sort(idx.begin(), idx.end(),
              [&](size_t a, size_t b) { return r.events[a].start_ns < r.events[b].start_ns; });
    for (size_t k = 1; k < idx.size(); ++k) {
      const traces::Event& a = r.events[idx[k - 1]];
      const traces::Event& b = r.events[idx[k]];
      if (a.start_ns < warmup_end || traces::is_comm(b.category) || traces::is_comm(a.category))
        continue;
      const int64_t a_end = a.start_ns + a.dur_ns;
      if (b.start_ns < a_end || launch_end[idx[k]] > a_end) continue;
      // Another lane's event ending in (a_end, b.start]: b may have waited for it.
      auto it = std::upper_bound(ends.begin(), ends.end(),
                                 std::make_pair(a_end, std::numeric_limits<uint32_t>::max()));
      bool waited = false;
      for (; it != ends.end() && it->first <= b.start_ns; ++it)
        if (it->second != lane) {
          waited = true;
          break;
        }
      if (!waited) gaps->push_back(static_cast<double>(b.start_ns - a_end));
    }
  }
}

}  // namespace shardscope::sim::calibrate_detail
