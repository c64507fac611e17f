// The Statistics tab's share column ("% of self time") without a window:
// concurrent and nested events never push a row past 100%, and each table's
// shares sum to 100% over one stated denominator.
#include <catch2/catch.hpp>

#include "gui/stats_view.h"
#include "traces/metrics.h"

namespace gui = shardscope::gui;
namespace tr = shardscope::traces;

namespace {

const tr::BreakdownRow& row(const std::vector<tr::BreakdownRow>& rows, const std::string& key) {
  for (const tr::BreakdownRow& r : rows)
    if (r.key == key) return r;
  FAIL("no row " << key);
  return rows.front();
}

}  // namespace

TEST_CASE("stats: two concurrent kernels and nested markers stay within 100%, rows sum to 100%") {
  // One rank, no steps (one reported window), times in us:
  //   stream A  compute "gemm"      [0, 100]
  //   stream B  compute "gemm"      [0, 100]   concurrent with A
  //   comm      all_gather "ag"     [50, 150]
  //   host      marker "step"       [0, 200], marker "fwd" [10, 60] nested in it
  // Step time 200 us; the old "share of step" (total / step time) gave compute
  // 200 / 200 = 100% and marker 250 / 200 = 125%.
  // Self times: compute 100 + 100 = 200, all_gather 100, marker 150 + 50 = 200
  // (the parent's 200 less its child's 50, plus the child's 50); summed 500 us.
  // Shares: compute 200/500 = 0.4, all_gather 100/500 = 0.2, marker 0.4.
  tr::Trace t;
  tr::RankTrace& r = t.add_rank(0);
  const uint32_t a = t.add_lane(r, "stream A", tr::LaneKind::compute);
  const uint32_t b = t.add_lane(r, "stream B", tr::LaneKind::compute);
  const uint32_t comm = t.add_lane(r, "comm", tr::LaneKind::comm);
  const uint32_t host = t.add_lane(r, "host", tr::LaneKind::host);
  tr::add_event(r, a, t.intern("gemm"), tr::Category::compute, 0, 100000);
  tr::add_event(r, b, t.intern("gemm"), tr::Category::compute, 0, 100000);
  tr::add_event(r, comm, t.intern("ag"), tr::Category::comm_all_gather, 50000, 100000);
  tr::add_event(r, host, t.intern("step"), tr::Category::marker, 0, 200000);
  tr::add_event(r, host, t.intern("fwd"), tr::Category::marker, 10000, 50000);
  const tr::Metrics m = tr::compute_metrics(t);
  REQUIRE(m.total.step_time_ms == Approx(0.2));

  const double summed = gui::summed_self_ms(m.by_category);
  CHECK(summed == Approx(0.5));
  CHECK(gui::self_time_share(row(m.by_category, "compute"), summed) == Approx(0.4));
  CHECK(gui::self_time_share(row(m.by_category, "comm.all_gather"), summed) == Approx(0.2));
  CHECK(gui::self_time_share(row(m.by_category, "marker"), summed) == Approx(0.4));

  // Every table: the same denominator, shares in [0, 1] summing to 1.
  for (const auto* rows : {&m.by_category, &m.by_op, &m.by_unit}) {
    CHECK(gui::summed_self_ms(*rows) == Approx(0.5));
    double sum = 0;
    for (const tr::BreakdownRow& x : *rows) {
      const double s = gui::self_time_share(x, gui::summed_self_ms(*rows));
      CHECK(s >= 0);
      CHECK(s <= 1);
      sum += s;
    }
    CHECK(sum == Approx(1.0));
  }
  // By op: gemm 200 of 500 (two concurrent kernels: 40%, not 100% of the step).
  CHECK(gui::self_time_share(row(m.by_op, "gemm"), summed) == Approx(0.4));
  CHECK(gui::self_time_share(row(m.by_op, "step"), summed) == Approx(0.3));  // 150 / 500
}

TEST_CASE("stats: a table without self time gives shares of 0, not a division by zero") {
  const std::vector<tr::BreakdownRow> rows = {{"tick", 3, 0, 0, 0}};
  CHECK(gui::summed_self_ms(rows) == 0);
  CHECK(gui::self_time_share(rows[0], 0) == 0);
  CHECK(gui::summed_self_ms({}) == 0);
}
