// Time view arithmetic, ruler ticks and labels, screen and lane layout, hit
// testing: the geometry the viewer draws with, checked without a window.
#include <cmath>

#include <catch2/catch.hpp>

#include "gui/layout.h"
#include "gui/script.h"
#include "gui/time_ruler.h"
#include "gui/time_view.h"

namespace gui = shardscope::gui;
namespace tr = shardscope::traces;

TEST_CASE("time view: zoom keeps the time under the cursor, pan moves by pixels x scale") {
  const gui::TimeView v = gui::view_of_range(1000, 2000, 500);  // 2 ns per px
  CHECK(v.ns_per_px == Approx(2.0));
  CHECK(v.start_ns == Approx(1000));
  const gui::TimeView z = gui::zoom_at(v, 125, 4.0);
  CHECK(z.ns_per_px == Approx(0.5));
  CHECK(z.t_of(125) == Approx(v.t_of(125)));  // 1250 ns stays under x = 125
  const gui::TimeView p = gui::pan_by(v, 50);
  CHECK(p.start_ns == Approx(900));  // content moves right: 100 ns earlier at x = 0
  // Clamped at the finest scale.
  CHECK(gui::zoom_at(v, 0, 1e12).ns_per_px == gui::kMinNsPerPx);
  // An empty range shows 1 us around it.
  const gui::TimeView e = gui::view_of_range(5000, 5000, 1000);
  CHECK(e.ns_per_px == Approx(1.0));
  CHECK(e.start_ns == Approx(4500));
}

TEST_CASE("ruler: 1-2-5 steps at least min_px apart, majors on round values, labels in units") {
  CHECK(gui::tick_step_ns(1.0, 90) == Approx(100));   // 90 ns wanted -> 100
  CHECK(gui::tick_step_ns(1.0, 110) == Approx(200));  // 110 -> 200
  CHECK(gui::tick_step_ns(10.0, 30) == Approx(500));  // 300 -> 500
  CHECK(gui::tick_step_ns(1e6, 90) == Approx(1e8));   // 9e7 -> 1e8
  CHECK(gui::minor_per_major(200) == 4);
  CHECK(gui::minor_per_major(500) == 5);
  // 0..1000 ns over 900 px: majors every 100 ns split in 5 minor ticks of 20 ns.
  const auto ticks = gui::ruler_ticks(gui::TimeView{0, 1000.0 / 900}, 900, 90);
  REQUIRE(ticks.size() == 51);
  int majors = 0;
  for (const gui::Tick& t : ticks) {
    if (t.major) {
      ++majors;
      CHECK(std::fmod(t.t_ns + 1e-9, 100.0) < 1e-6);
    }
  }
  CHECK(majors == 11);
  CHECK(gui::format_time(1500) == "1.5 us");
  CHECK(gui::format_time(250) == "250 ns");
  CHECK(gui::format_time(2.5e9) == "2.5 s");
  CHECK(gui::format_time(12000, 1000) == "12 us");
  CHECK(gui::format_time(12500, 500) == "12.5 us");
  CHECK(gui::format_time(-1e-7, 1000) == "0 us");
  CHECK(gui::format_bytes(3.0 * 1024 * 1024) == "3.00 MiB");
  CHECK(gui::format_count(1234567) == "1,234,567");
}

TEST_CASE("screen layout: windows tile the framebuffer, memory shares the timeline's x extent") {
  const gui::ScreenLayout s = gui::screen_layout(1200, 800, true);
  CHECK(s.top_bar.h == gui::kTopBarHeight);
  CHECK(s.timeline.x == s.memory.x);
  CHECK(s.timeline.w == s.memory.w);
  CHECK(s.timeline.y1() == s.memory.y);
  CHECK(s.memory.y1() == 800);
  CHECK(s.side.x == s.timeline.x1());
  CHECK(s.side.x1() == 1200);
  CHECK(s.compare_b.y == s.compare_a.y1());
  const gui::TimelineRects t = gui::timeline_rects(s.timeline);
  const gui::TimelineRects m = gui::timeline_rects(s.memory, false, false);
  CHECK(t.lanes.x == m.lanes.x);  // plots line up with lanes
  CHECK(t.lanes.w == m.lanes.w);
  CHECK(t.lanes.y == s.timeline.y + gui::kRulerHeight);
  CHECK(t.legend.y1() == s.timeline.y1());
}

TEST_CASE("lane layout: header + rows per lane, collapsed ranks keep only their header") {
  tr::Trace t;
  for (int rank = 0; rank < 2; ++rank) {
    tr::RankTrace& r = t.add_rank(rank);
    const uint32_t a = t.add_lane(r, "compute", tr::LaneKind::compute);
    const uint32_t b = t.add_lane(r, "all_gather", tr::LaneKind::comm);
    tr::add_event(r, a, t.intern("x"), tr::Category::compute, 0, 100);
    tr::add_event(r, a, t.intern("y"), tr::Category::compute, 10, 20);  // nested: 2 rows
    tr::add_event(r, b, t.intern("z"), tr::Category::comm_all_gather, 0, 100);
  }
  const gui::TraceIndex idx = gui::build_index(t);
  gui::LaneMetrics m;  // header 20, rows 18, lane gap 2, rank gap 6
  gui::LaneLayout l = gui::layout_lanes(idx, {}, m);
  REQUIRE(l.lanes.size() == 4);
  CHECK(l.lanes[0].y0 == 20);
  CHECK(l.lanes[0].rows == 2);
  CHECK(l.lanes[0].y1 == 56);
  CHECK(l.lanes[1].y0 == 58);
  CHECK(l.lanes[1].y1 == 76);
  CHECK(l.ranks[1].y0 == 84);  // 76 + 2 (lane gap) + 6 (rank gap)
  CHECK(l.height == 84 + 20 + 36 + 2 + 18 + 2 + 6);
  size_t band = 0;
  uint32_t row = 0;
  REQUIRE(gui::hit_lane(l, 40, &band, &row));
  CHECK(band == 0);
  CHECK(row == 1);
  CHECK_FALSE(gui::hit_lane(l, 10, &band, &row));  // the header
  CHECK_FALSE(gui::hit_lane(l, 57, &band, &row));  // the gap
  size_t rank = 9;
  REQUIRE(gui::hit_rank_header(l, 90, &rank));
  CHECK(rank == 1);
  l = gui::layout_lanes(idx, {1, 0}, m);
  REQUIRE(l.lanes.size() == 2);
  CHECK(l.ranks[1].y0 == 26);  // 20 + 6
  CHECK(l.lanes[0].rank == 1);
}

TEST_CASE("hit_item: the item under x, with slack, nearest first") {
  const std::vector<gui::DrawItem> items = {{10, 20, 0, 1}, {30, 30.2, 1, 5}, {50, 80, 6, 1}};
  CHECK(gui::hit_item(items, 15) == 0);
  CHECK(gui::hit_item(items, 30.5) == 1);  // a sub-pixel item is at least 1 px wide
  CHECK(gui::hit_item(items, 49.5) == 2);
  CHECK(gui::hit_item(items, 40) == -1);
  CHECK(gui::hit_item({}, 1) == -1);
}

TEST_CASE("script options: times with units, ranges, sizes, selections, tabs") {
  CHECK(gui::parse_time_ns("250", "--zoom") == 250);
  CHECK(gui::parse_time_ns("1.5us", "--zoom") == 1500);
  CHECK(gui::parse_time_ns("2ms", "--zoom") == 2e6);
  CHECK_THROWS_WITH(gui::parse_time_ns("2h", "--zoom"), Catch::Contains("--zoom"));
  double a = 0, b = 0;
  gui::parse_time_range("1us:3us", "--zoom", &a, &b);
  CHECK(a == 1000);
  CHECK(b == 3000);
  CHECK_THROWS(gui::parse_time_range("3us:1us", "--zoom", &a, &b));
  int w = 0, h = 0;
  gui::parse_size("1200x800", &w, &h);
  CHECK(w == 1200);
  CHECK(h == 800);
  CHECK_THROWS_WITH(gui::parse_size("1200", &w, &h), Catch::Contains("--size"));
  int rank = 0;
  std::string name;
  gui::parse_select("3:h.0 fwd", &rank, &name);
  CHECK(rank == 3);
  CHECK(name == "h.0 fwd");
  gui::parse_select("a:b", &rank, &name);
  CHECK(rank == -1);
  CHECK(name == "a:b");
  CHECK(gui::parse_tab("stats") == gui::Tab::statistics);
  CHECK_THROWS(gui::parse_tab("docking"));
}
