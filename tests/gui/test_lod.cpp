// The level-of-detail function in isolation: drawn items stay bounded by the
// pixel width whatever the event count, and every visible event is counted
// in exactly one item that covers it.
#include <random>

#include <catch2/catch.hpp>

#include "gui/lod.h"

namespace gui = shardscope::gui;
namespace tr = shardscope::traces;

namespace {

// One lane of `n` events: random gaps and durations >= 1 ns (many far below a
// pixel, some wide), non-overlapping, on one rank.
tr::Trace random_lane_trace(size_t n, uint32_t seed) {
  tr::Trace t;
  tr::RankTrace& r = t.add_rank(0);
  const uint32_t lane = t.add_lane(r, "compute", tr::LaneKind::compute);
  const uint32_t name = t.intern("op");
  std::mt19937_64 rng(seed);
  int64_t time = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t kind = rng() % 100;
    const int64_t dur =
        kind < 90 ? 1 + static_cast<int64_t>(rng() % 50) : static_cast<int64_t>(rng() % 200000);
    const int64_t gap =
        kind % 7 == 0 ? static_cast<int64_t>(rng() % 100000) : static_cast<int64_t>(rng() % 20);
    time += gap;
    tr::add_event(r, lane, name, tr::Category::compute, time, dur);
    time += dur;
  }
  return t;
}

// Checks the LOD contract for one view; returns the number of items.
size_t check_lod(const gui::Track& track, const gui::TimeView& v, double width, double min_px) {
  std::vector<gui::DrawItem> items;
  gui::lod_items(track, v, width, min_px, items);
  // Visible by brute force: intersects the closed range [start, end].
  const double t0 = v.start_ns, t1 = v.end_ns(width);
  std::vector<size_t> visible;
  for (size_t i = 0; i < track.size(); ++i)
    if (static_cast<double>(track.end[i]) >= t0 && static_cast<double>(track.start[i]) <= t1)
      visible.push_back(i);
  uint64_t counted = 0;
  size_t next = visible.empty() ? 0 : visible.front();
  for (const gui::DrawItem& it : items) {
    REQUIRE(it.count >= 1);
    REQUIRE(it.first == next);  // consecutive, no event skipped or counted twice
    next = it.first + it.count;
    counted += it.count;
    // The item covers every event it counts.
    for (size_t k = it.first; k < it.first + it.count; ++k) {
      REQUIRE(it.x0 <= v.x_of(static_cast<double>(track.start[k])) + 1e-6);
      REQUIRE(it.x1 >= v.x_of(static_cast<double>(track.end[k])) - 1e-6);
    }
    if (it.count == 1) {
      REQUIRE(it.x1 - it.x0 >= 0);
    }
  }
  REQUIRE(counted == visible.size());
  REQUIRE(items.size() <= static_cast<size_t>(2 * width / min_px + 5));
  return items.size();
}

}  // namespace

TEST_CASE("lod: items bounded by the pixel width and no visible event lost, 1e3 to 1e6 events") {
  for (size_t n : {size_t{1000}, size_t{100000}, size_t{1000000}}) {
    const tr::Trace t = random_lane_trace(n, static_cast<uint32_t>(n));
    const gui::TraceIndex idx = gui::build_index(t);
    REQUIRE(idx.ranks.size() == 1);
    REQUIRE(idx.ranks[0].lanes[0].rows.size() == 1);  // non-overlapping: one row
    const gui::Track& track = idx.ranks[0].lanes[0].rows[0];
    REQUIRE(track.size() == n);
    const double width = 1000;
    // Full zoom-out, a mid zoom, a deep zoom, and a view past the end.
    const double span = static_cast<double>(idx.end_ns);
    const size_t full = check_lod(track, gui::view_of_range(0, span, width), width, 3);
    check_lod(track, gui::view_of_range(span * 0.4, span * 0.45, width), width, 3);
    check_lod(track, gui::view_of_range(span * 0.5, span * 0.5 + 20000, width), width, 3);
    check_lod(track, gui::view_of_range(span * 2, span * 3, width), width, 3);
    // Folding really happens when events are denser than pixels.
    if (n >= 100000) REQUIRE(full < n / 50);
  }
}

TEST_CASE("lod: a wide event is one item, 1,000 zero-length events at one instant fold into one") {
  tr::Trace t;
  tr::RankTrace& r = t.add_rank(0);
  const uint32_t lane = t.add_lane(r, "compute", tr::LaneKind::compute);
  tr::add_event(r, lane, t.intern("wide"), tr::Category::compute, 0, 500);
  for (int i = 0; i < 1000; ++i)
    tr::add_event(r, lane, t.intern("tick"), tr::Category::compute, 700, 0);
  const gui::TraceIndex idx = gui::build_index(t);
  const gui::Track& track = idx.ranks[0].lanes[0].rows[0];
  std::vector<gui::DrawItem> items;
  // 1 ns per pixel over [0, 1000).
  gui::lod_items(track, gui::TimeView{0, 1}, 1000, 3, items);
  REQUIRE(items.size() == 2);
  CHECK(items[0].count == 1);
  CHECK(items[0].x0 == 0);
  CHECK(items[0].x1 == 500);
  CHECK(items[1].count == 1000);
  CHECK(items[1].x0 == 700);
}

TEST_CASE("lod: nested and overlapping events go to rows below, rows never overlap") {
  tr::Trace t;
  tr::RankTrace& r = t.add_rank(3);
  const uint32_t host = t.add_lane(r, "host", tr::LaneKind::host);
  const uint32_t comp = t.add_lane(r, "compute", tr::LaneKind::compute);
  const uint32_t n = t.intern("x");
  // Added out of order, on purpose: compute lane first, host lane second.
  tr::add_event(r, comp, n, tr::Category::compute, 0, 100);
  tr::add_event(r, host, n, tr::Category::marker, 0, 1000);   // parent
  tr::add_event(r, host, n, tr::Category::marker, 100, 300);  // child
  tr::add_event(r, host, n, tr::Category::marker, 150, 50);   // grandchild
  tr::add_event(r, host, n, tr::Category::marker, 500, 100);  // second child
  tr::add_event(r, host, n, tr::Category::marker, 2000, 10);  // after everything
  const gui::TraceIndex idx = gui::build_index(t);
  const gui::RankIndex& ri = idx.ranks[0];
  REQUIRE(ri.lanes.size() == 2);
  CHECK(ri.lanes[0].lane == host);  // host (LaneKind 0) first
  CHECK(ri.lanes[1].lane == comp);
  REQUIRE(ri.lanes[0].rows.size() == 3);
  CHECK(ri.lanes[0].rows[0].size() == 2);  // parent, the late one
  CHECK(ri.lanes[0].rows[1].size() == 2);  // both children
  CHECK(ri.lanes[0].rows[2].size() == 1);  // grandchild
  CHECK(ri.depth[1] == 0);
  CHECK(ri.depth[2] == 1);
  CHECK(ri.depth[3] == 2);
  CHECK(ri.depth[4] == 1);
  for (const gui::Track& tr_ : ri.lanes[0].rows)
    for (size_t i = 1; i < tr_.size(); ++i) CHECK(tr_.start[i] >= tr_.end[i - 1]);
  CHECK(idx.origin_ns == 0);
  CHECK(idx.end_ns == 2010);
  CHECK(idx.category_mask == ((1u << 0) | (1u << 10)));
}

TEST_CASE("lod: an empty trace and a rank without events index to empty rows") {
  tr::Trace t;
  CHECK(gui::build_index(t).ranks.empty());
  tr::RankTrace& r = t.add_rank(0);
  t.add_lane(r, "compute", tr::LaneKind::compute);
  const gui::TraceIndex idx = gui::build_index(t);
  REQUIRE(idx.ranks[0].lanes.size() == 1);
  REQUIRE(idx.ranks[0].lanes[0].rows.size() == 1);
  std::vector<gui::DrawItem> items;
  gui::lod_items(idx.ranks[0].lanes[0].rows[0], gui::TimeView{0, 1}, 100, 3, items);
  CHECK(items.empty());
}

TEST_CASE("lod: first_end_at_least (coarse samples, then a block) equals a plain lower_bound") {
  const tr::Trace t = random_lane_trace(20000, 11);
  const gui::TraceIndex idx = gui::build_index(t);
  const gui::Track& track = idx.ranks[0].lanes[0].rows[0];
  REQUIRE(track.coarse_end.size() == (track.size() + 63) / 64);
  std::mt19937_64 rng(3);
  for (int k = 0; k < 20000; ++k) {
    size_t lo = rng() % track.size(), hi = rng() % (track.size() + 1);
    if (lo > hi) std::swap(lo, hi);
    const double q = static_cast<double>(rng() % static_cast<uint64_t>(idx.end_ns + 10));
    size_t want = lo;
    while (want < hi && static_cast<double>(track.end[want]) < q) ++want;
    REQUIRE(gui::first_end_at_least(track, lo, hi, q) == want);
  }
}

namespace {

// One row: `kinds` events back to back from t = 0, each (category, duration),
// with 1 ns between events.
tr::Trace one_row(const std::vector<std::pair<tr::Category, int64_t>>& kinds) {
  tr::Trace t;
  tr::RankTrace& r = t.add_rank(0);
  const uint32_t lane = t.add_lane(r, "stream 7", tr::LaneKind::compute);
  const uint32_t name = t.intern("k");
  int64_t time = 0;
  for (const auto& [cat, dur] : kinds) {
    tr::add_event(r, lane, name, cat, time, dur);
    time += dur + 1;
  }
  return t;
}

// The one fold of the whole row at 10 ns per pixel (folds below 3 px = 30 ns).
gui::DrawItem whole_row_fold(const gui::Track& track) {
  std::vector<gui::DrawItem> items;
  gui::lod_items(track, gui::TimeView{0, 10}, 1000, 3, items);
  REQUIRE(items.size() == 1);
  REQUIRE(items[0].count == track.size());
  return items[0];
}

}  // namespace

TEST_CASE("lod: a fold of 1 memcpy then 257 compute kernels is coloured compute, not memcpy") {
  // memcpy.h2d 20 ns, then 257 kernels of 2 ns: compute holds 514 ns of the
  // fold's 534, though the first event is the copy.
  std::vector<std::pair<tr::Category, int64_t>> kinds = {{tr::Category::memcpy_h2d, 20}};
  for (int i = 0; i < 257; ++i) kinds.push_back({tr::Category::compute, 2});
  const tr::Trace t = one_row(kinds);
  const gui::TraceIndex idx = gui::build_index(t);
  const gui::Track& track = idx.ranks[0].lanes[0].rows[0];
  const gui::DrawItem fold = whole_row_fold(track);
  CHECK(fold.count == 258);
  // 258 > kCoarseStride: the prefix-sum path (samples at 0, 64, 128, 192, 256).
  CHECK(gui::dominant_category(track, fold.first, fold.count) == tr::Category::compute);
  // Its first 3 events alone (20 ns of copy, 4 of compute): the copy.
  CHECK(gui::dominant_category(track, 0, 3) == tr::Category::memcpy_h2d);
}

TEST_CASE("lod: a fold whose time is mostly memcpy is coloured memcpy, whatever comes first") {
  // 5 kernels of 2 ns (10 ns), 2 copies d2h of 25 ns (50 ns), 5 kernels (10 ns):
  // compute 20 ns < memcpy.d2h 50 ns, though compute is first and more numerous.
  std::vector<std::pair<tr::Category, int64_t>> kinds;
  for (int i = 0; i < 5; ++i) kinds.push_back({tr::Category::compute, 2});
  kinds.push_back({tr::Category::memcpy_d2h, 25});
  kinds.push_back({tr::Category::memcpy_d2h, 25});
  for (int i = 0; i < 5; ++i) kinds.push_back({tr::Category::compute, 2});
  const tr::Trace t = one_row(kinds);
  const gui::TraceIndex idx = gui::build_index(t);
  const gui::Track& track = idx.ranks[0].lanes[0].rows[0];
  const gui::DrawItem fold = whole_row_fold(track);
  CHECK(fold.count == 12);
  CHECK(gui::dominant_category(track, fold.first, fold.count) == tr::Category::memcpy_d2h);
}

TEST_CASE("lod: fold colour ties go to the lower category among those present") {
  // compute 10 ns = memcpy.h2d 10 ns: compute (0 < 5).
  {
    const tr::Trace t = one_row({{tr::Category::memcpy_h2d, 10}, {tr::Category::compute, 10}});
    const gui::TraceIndex idx = gui::build_index(t);
    const gui::Track& track = idx.ranks[0].lanes[0].rows[0];
    CHECK(gui::dominant_category(track, 0, 2) == tr::Category::compute);
  }
  // Zero-length marker and sync events: 0 ns each, sync (9) before marker
  // (10); compute (0), absent, is not chosen.
  {
    const tr::Trace t = one_row({{tr::Category::marker, 0}, {tr::Category::sync, 0}});
    const gui::TraceIndex idx = gui::build_index(t);
    const gui::Track& track = idx.ranks[0].lanes[0].rows[0];
    CHECK(gui::dominant_category(track, 0, 2) == tr::Category::sync);
  }
}

TEST_CASE("lod: a row of one category keeps no per-event categories, folds take that category") {
  const tr::Trace t = one_row({{tr::Category::memset, 3}, {tr::Category::memset, 4}});
  const gui::TraceIndex idx = gui::build_index(t);
  const gui::Track& track = idx.ranks[0].lanes[0].rows[0];
  CHECK(track.category_mask == (1u << 8));
  CHECK(track.category.empty());
  CHECK(track.coarse_category_ns.empty());
  CHECK(gui::dominant_category(track, 0, 2) == tr::Category::memset);
}

TEST_CASE("lod: dominant_category (coarse samples plus at most 32 events) equals brute force") {
  // 10,000 events of 4 categories with random durations, including 0.
  std::mt19937_64 rng(5);
  const tr::Category cats[] = {tr::Category::compute, tr::Category::comm_all_gather,
                               tr::Category::memcpy_h2d, tr::Category::marker};
  std::vector<std::pair<tr::Category, int64_t>> kinds;
  for (int i = 0; i < 10000; ++i)
    kinds.push_back({cats[rng() % 4], static_cast<int64_t>(rng() % 4 == 0 ? 0 : rng() % 1000)});
  const tr::Trace t = one_row(kinds);
  const gui::TraceIndex idx = gui::build_index(t);
  const gui::Track& track = idx.ranks[0].lanes[0].rows[0];
  REQUIRE(track.size() == 10000);
  REQUIRE(track.coarse_category_ns.size() == (10000 / 64 + 1) * tr::kCategoryCount);
  const auto brute = [&](size_t first, size_t count) {
    int64_t ns[tr::kCategoryCount] = {};
    bool present[tr::kCategoryCount] = {};
    for (size_t k = first; k < first + count; ++k) {
      const auto c = static_cast<size_t>(kinds[k].first);
      ns[c] += kinds[k].second;
      present[c] = true;
    }
    int best = -1;
    for (int c = 0; c < tr::kCategoryCount; ++c)
      if (present[c] && (best < 0 || ns[c] > ns[best])) best = c;
    return static_cast<tr::Category>(best);
  };
  // Every fold ending at the last event (the final sample, 10000 % 64 != 0),
  // then random ones of every size.
  CHECK(gui::dominant_category(track, 0, 10000) == brute(0, 10000));
  for (int k = 0; k < 3000; ++k) {
    const size_t first = rng() % 10000;
    const size_t count = 1 + rng() % (10000 - first);
    REQUIRE(gui::dominant_category(track, first, count) == brute(first, count));
  }
}
