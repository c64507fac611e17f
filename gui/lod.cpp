#include "gui/lod.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <set>

namespace shardscope::gui {

namespace {

int64_t earliest_time(const traces::Trace& t) {
  int64_t lo = std::numeric_limits<int64_t>::max();
  for (const traces::RankTrace& r : t.ranks) {
    for (const traces::Event& e : r.events) lo = std::min(lo, e.start_ns);
    if (!r.memory.empty()) lo = std::min(lo, r.memory.front().time_ns);
    if (!r.steps.empty()) lo = std::min(lo, r.steps.front().start_ns);
  }
  return lo == std::numeric_limits<int64_t>::max() ? 0 : lo;
}

constexpr size_t kCategories = traces::kCategoryCount;

bool single_category(uint32_t mask) {
  return (mask & (mask - 1)) == 0;
}

// The category summaries of a row (see Track): nothing beyond the mask for a
// row of one category.
void summarize_categories(const traces::RankTrace& r, Track& tr) {
  for (uint32_t e : tr.event) tr.category_mask |= 1u << static_cast<unsigned>(r.events[e].category);
  if (single_category(tr.category_mask)) return;
  constexpr size_t S = Track::kCoarseStride;
  const size_t samples = tr.size() / S + 1;
  tr.category.resize(tr.size());
  tr.coarse_category_ns.assign(samples * kCategories, 0);
  tr.coarse_category_count.assign(samples * kCategories, 0);
  int64_t ns[kCategories] = {};
  uint32_t count[kCategories] = {};
  const auto sample = [&](size_t k) {
    std::copy(ns, ns + kCategories, tr.coarse_category_ns.begin() + k * kCategories);
    std::copy(count, count + kCategories, tr.coarse_category_count.begin() + k * kCategories);
  };
  for (size_t i = 0; i < tr.size(); ++i) {
    if (i % S == 0) sample(i / S);
    const auto c = static_cast<uint8_t>(r.events[tr.event[i]].category);
    tr.category[i] = c;
    ns[c] += tr.end[i] - tr.start[i];  // rows never overlap: the sum is <= the row's span
    ++count[c];
  }
  if (tr.size() % S == 0) sample(tr.size() / S);
}

// Per-category event time and count over some positions of a track.
struct CategoryTotals {
  int64_t ns[kCategories] = {};
  int64_t count[kCategories] = {};
  void add(const Track& tr, size_t from, size_t to, int64_t sign) {
    for (size_t j = from; j < to; ++j) {
      ns[tr.category[j]] += sign * (tr.end[j] - tr.start[j]);
      count[tr.category[j]] += sign;
    }
  }
  // Adds sign x the totals of positions [0, i): the nearer coarse sample,
  // corrected by at most kCoarseStride / 2 events.
  void add_prefix(const Track& tr, size_t i, int64_t sign) {
    constexpr size_t S = Track::kCoarseStride;
    const size_t samples = tr.coarse_category_ns.size() / kCategories;
    size_t k = i / S;
    if (i - k * S > S / 2 && k + 1 < samples) {
      ++k;
      add(tr, i, k * S, -sign);
    } else {
      add(tr, k * S, i, sign);
    }
    for (size_t c = 0; c < kCategories; ++c) {
      ns[c] += sign * tr.coarse_category_ns[k * kCategories + c];
      count[c] += sign * static_cast<int64_t>(tr.coarse_category_count[k * kCategories + c]);
    }
  }
};

// Interval partitioning: events sorted by (start, longer first) go to the
// lowest row free at their start, so a row never holds two overlapping
// events and nested events land below their parent.
void partition_rows(const traces::RankTrace& r, int64_t origin, std::vector<uint32_t>& order,
                    LaneIndex& lane, std::vector<uint16_t>& depth) {
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const traces::Event& x = r.events[a];
    const traces::Event& y = r.events[b];
    if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
    if (x.dur_ns != y.dur_ns) return x.dur_ns > y.dur_ns;
    return a < b;
  });
  using Busy = std::pair<int64_t, uint32_t>;  // (end, row)
  std::priority_queue<Busy, std::vector<Busy>, std::greater<Busy>> busy;
  std::set<uint32_t> free_rows;
  std::vector<uint64_t> counts;
  std::vector<uint32_t> row_of(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const traces::Event& e = r.events[order[k]];
    while (!busy.empty() && busy.top().first <= e.start_ns) {
      free_rows.insert(busy.top().second);
      busy.pop();
    }
    uint32_t row;
    if (free_rows.empty()) {
      row = static_cast<uint32_t>(counts.size());
      counts.push_back(0);
    } else {
      row = *free_rows.begin();
      free_rows.erase(free_rows.begin());
    }
    ++counts[row];
    row_of[k] = row;
    busy.push({e.start_ns + e.dur_ns, row});
  }
  lane.rows.assign(std::max<size_t>(counts.size(), 1), Track{});
  for (size_t row = 0; row < counts.size(); ++row) {
    lane.rows[row].event.reserve(counts[row]);
    lane.rows[row].start.reserve(counts[row]);
    lane.rows[row].end.reserve(counts[row]);
  }
  for (size_t k = 0; k < order.size(); ++k) {
    const traces::Event& e = r.events[order[k]];
    Track& tr = lane.rows[row_of[k]];
    tr.event.push_back(order[k]);
    tr.start.push_back(e.start_ns - origin);
    tr.end.push_back(e.start_ns - origin + e.dur_ns);
    depth[order[k]] = static_cast<uint16_t>(std::min<uint32_t>(row_of[k], 0xffff));
  }
  for (Track& tr : lane.rows) {
    for (size_t i = 0; i < tr.size(); i += Track::kCoarseStride) tr.coarse_end.push_back(tr.end[i]);
    summarize_categories(r, tr);
  }
  lane.events = order.size();
}

}  // namespace

TraceIndex build_index(const traces::Trace& t) {
  TraceIndex idx;
  idx.origin_ns = earliest_time(t);
  for (size_t slot = 0; slot < t.ranks.size(); ++slot) {
    const traces::RankTrace& r = t.ranks[slot];
    RankIndex ri;
    ri.rank_slot = slot;
    ri.depth.assign(r.events.size(), 0);
    std::vector<std::vector<uint32_t>> by_lane(r.lanes.size());
    for (size_t i = 0; i < r.events.size(); ++i) {
      by_lane[r.events[i].lane].push_back(static_cast<uint32_t>(i));
      idx.category_mask |= 1u << static_cast<unsigned>(r.events[i].category);
      const int64_t end = r.events[i].start_ns - idx.origin_ns + r.events[i].dur_ns;
      idx.end_ns = std::max(idx.end_ns, end);
    }
    for (const traces::MemoryEvent& m : r.memory)
      idx.end_ns = std::max(idx.end_ns, m.time_ns - idx.origin_ns);
    for (const traces::Step& s : r.steps)
      idx.end_ns = std::max(idx.end_ns, s.end_ns - idx.origin_ns);
    std::vector<uint32_t> lane_order(r.lanes.size());
    for (size_t l = 0; l < lane_order.size(); ++l) lane_order[l] = static_cast<uint32_t>(l);
    std::stable_sort(lane_order.begin(), lane_order.end(),
                     [&](uint32_t a, uint32_t b) { return r.lanes[a].kind < r.lanes[b].kind; });
    for (uint32_t l : lane_order) {
      LaneIndex li;
      li.lane = l;
      partition_rows(r, idx.origin_ns, by_lane[l], li, ri.depth);
      ri.lanes.push_back(std::move(li));
    }
    idx.events += r.events.size();
    idx.ranks.push_back(std::move(ri));
  }
  return idx;
}

size_t first_end_at_least(const Track& track, size_t lo, size_t hi, double t) {
  const auto less = [](int64_t e, double v) { return static_cast<double>(e) < v; };
  if (lo >= hi) return hi;
  // Coarse level: the first sampled end >= t bounds the answer from above;
  // the sample before it from below.
  constexpr size_t S = Track::kCoarseStride;
  const size_t k_lo = (lo + S - 1) / S;
  const size_t k = static_cast<size_t>(
      std::lower_bound(track.coarse_end.begin() +
                           static_cast<std::ptrdiff_t>(std::min(k_lo, track.coarse_end.size())),
                       track.coarse_end.end(), t, less) -
      track.coarse_end.begin());
  size_t a = lo, b = hi;
  if (k > k_lo) a = std::max(a, (k - 1) * S + 1);
  if (k < track.coarse_end.size()) b = std::min(b, k * S + 1);
  if (a >= b) return std::min(std::max(a, lo), hi);
  const auto it = std::lower_bound(track.end.begin() + static_cast<std::ptrdiff_t>(a),
                                   track.end.begin() + static_cast<std::ptrdiff_t>(b), t, less);
  return static_cast<size_t>(it - track.end.begin());
}

traces::Category dominant_category(const Track& track, size_t first, size_t count) {
  if (single_category(track.category_mask)) {
    for (size_t c = 0; c < kCategories; ++c)
      if (track.category_mask & (1u << c)) return static_cast<traces::Category>(c);
    return traces::Category::compute;  // an empty row: nothing to fold
  }
  CategoryTotals totals;
  if (count <= Track::kCoarseStride) {
    totals.add(track, first, first + count, 1);
  } else {
    totals.add_prefix(track, first + count, 1);
    totals.add_prefix(track, first, -1);
  }
  size_t best = kCategories;
  for (size_t c = 0; c < kCategories; ++c)
    if (totals.count[c] > 0 && (best == kCategories || totals.ns[c] > totals.ns[best])) best = c;
  return static_cast<traces::Category>(best == kCategories ? 0 : best);
}

void visible_range(const Track& track, const TimeView& view, double width_px, size_t* first,
                   size_t* last) {
  // Visible: end >= view start and start <= view end. Ends and starts are
  // both sorted (rows never overlap), so both bounds are binary searches.
  const double t0 = view.start_ns;
  const double t1 = view.end_ns(width_px);
  const size_t lo = first_end_at_least(track, 0, track.size(), t0);
  const auto hi = std::upper_bound(track.start.begin(), track.start.end(), t1,
                                   [](double t, int64_t s) { return t < static_cast<double>(s); });
  *first = lo;
  *last = std::max(*first, static_cast<size_t>(hi - track.start.begin()));
}

void lod_items(const Track& track, const TimeView& view, double width_px, double min_px,
               std::vector<DrawItem>& out) {
  size_t i = 0, last = 0;
  visible_range(track, view, width_px, &i, &last);
  const double min_ns = min_px * view.ns_per_px;
  while (i < last) {
    const double s = static_cast<double>(track.start[i]);
    const double e = static_cast<double>(track.end[i]);
    if (e - s >= min_ns) {
      out.push_back({view.x_of(s), view.x_of(e), static_cast<uint32_t>(i), 1});
      ++i;
      continue;
    }
    // A run of narrow events: absorb every event that ends within min_ns of
    // the run's end (one binary search), then the next one too while it ends
    // less than 2 * min_ns further (narrow and close); each step moves the
    // run's end by >= min_ns, so a run costs O(its pixels * log n).
    double run_end = e;
    size_t j = i + 1;
    while (j < last) {
      const double limit = run_end + min_ns;
      const size_t k = first_end_at_least(track, j, last, limit);
      if (k > j) {
        run_end = std::max(run_end, static_cast<double>(track.end[k - 1]));
        j = k;
      }
      if (j >= last) break;
      const double next_end = static_cast<double>(track.end[j]);
      if (next_end - run_end >= 2 * min_ns) break;  // a gap or a wide event: visible apart
      if (next_end - static_cast<double>(track.start[j]) >= min_ns) break;
      run_end = std::max(run_end, next_end);
      ++j;
    }
    out.push_back(
        {view.x_of(s), view.x_of(run_end), static_cast<uint32_t>(i), static_cast<uint32_t>(j - i)});
    i = j;
  }
}

}  // namespace shardscope::gui
