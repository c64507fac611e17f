// Collectives matched across ranks: arrival skew, the slowest rank and what
// it was doing, and communication split into waiting for the last rank and
// transfer. Every number is worked out by hand.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/traces/sample_traces.h"
#include "traces/diff.h"
#include "traces/metrics.h"
#include "traces/metrics_collectives.h"

using namespace shardscope::traces;
using shardscope::traces::testing::ev;

namespace {

constexpr double kNsToMs = 1e-6;

// Two CPU ranks, one step [0, 2000) ns:
//   all_gather:     rank 0 arrives at 100, rank 1 at 400 (it ran "fc fwd"
//                   [150, 400) until then); both end at 600.
//   reduce_scatter: rank 1 arrives at 1000, rank 0 at 1100 (its "fc bwd"
//                   ended at 1050); both end at 1300.
Trace two_ranks(int32_t world) {
  Trace t;
  t.meta.source = Source::engine_cpu;
  t.meta.world_size = world;
  for (int32_t rank = 0; rank < 2; ++rank) {
    RankTrace& r = t.add_rank(rank);
    r.steps.push_back(Step{1, 0, 2000});
    const uint32_t compute = t.add_lane(r, "compute", LaneKind::compute);
    const uint32_t comm = t.add_lane(r, "comm", LaneKind::comm);
    const int64_t ag = rank == 0 ? 100 : 400;
    ev(t, r, comm, "all_gather h.0", Category::comm_all_gather, ag, 600 - ag, "h.0", "all_gather");
    if (rank == 1) ev(t, r, compute, "fc fwd", Category::compute, 150, 250, "h.0", "linear");
    if (rank == 0) ev(t, r, compute, "fc bwd", Category::compute, 700, 350, "h.0", "linear");
    const int64_t rs = rank == 0 ? 1100 : 1000;
    ev(t, r, comm, "reduce_scatter h.0", Category::comm_reduce_scatter, rs, 1300 - rs, "h.0",
       "reduce_scatter");
  }
  return t;
}

}  // namespace

TEST_CASE("collectives: arrival skew, the slowest rank and what it was doing", "[collectives]") {
  const CollectiveMatch m = match_collectives(two_ranks(2));
  REQUIRE(m.split);
  CHECK(m.unmatched == 0);
  REQUIRE(m.collectives.size() == 2);
  const MatchedCollective& ag = m.collectives[0];
  CHECK(ag.name == "all_gather h.0");
  CHECK(ag.step == 1);
  CHECK(ag.skew_ns() == 300);
  CHECK(ag.last_arrival_ns == 400);
  CHECK(ag.slowest_rank == 1);
  REQUIRE(ag.slowest_doing.found);
  CHECK(ag.slowest_doing.name == "fc fwd");
  CHECK(ag.slowest_doing.gap_ns == 0);  // it ran until it arrived
  const MatchedCollective& rs = m.collectives[1];
  CHECK(rs.skew_ns() == 100);
  CHECK(rs.slowest_rank == 0);
  CHECK(rs.slowest_doing.name == "fc bwd");
  CHECK(rs.slowest_doing.gap_ns == 50);  // ended at 1050, arrived at 1100
  // Rank 0 waits 300 at the all_gather, rank 1 100 at the reduce_scatter.
  CHECK(m.transfer_start.at(0)[0] == 400);

  const nlohmann::json j = collectives_to_json(m);
  CHECK(j["collectives"][0]["arrivals"][0]["wait_ms"].get<double>() == Approx(300 * kNsToMs));
  CHECK(j["collectives"][0]["arrivals"][0]["transfer_ms"].get<double>() == Approx(200 * kNsToMs));
  CHECK(j["collectives"][0]["arrivals"][1]["offset_ms"].get<double>() == Approx(300 * kNsToMs));
  const std::string text = format_collectives(m);
  CHECK(text.find("fc fwd (compute, until it arrived)") != std::string::npos);
  CHECK(text.find("fc bwd (compute, ended 0.000 ms before)") != std::string::npos);
}

TEST_CASE("collectives: comm split into wait and transfer per rank and step", "[collectives]") {
  const Metrics m = compute_metrics(two_ranks(2));
  CHECK(m.comm_split);
  REQUIRE(m.ranks.size() == 2);
  // Rank 0: COMM [100,600) [1100,1300) = 700; transfer [400,600) [1100,1300) = 400; wait 300.
  CHECK(m.ranks[0].comm_ms == Approx(700 * kNsToMs));
  CHECK(m.ranks[0].comm_transfer_ms == Approx(400 * kNsToMs));
  CHECK(m.ranks[0].comm_wait_ms == Approx(300 * kNsToMs));
  // Rank 1: COMM [400,600) [1000,1300) = 500; transfer 400; wait 100.
  CHECK(m.ranks[1].comm_transfer_ms == Approx(400 * kNsToMs));
  CHECK(m.ranks[1].comm_wait_ms == Approx(100 * kNsToMs));
  CHECK(m.total.comm_wait_ms == Approx(200 * kNsToMs));
  // Breakdown rows: the all_gather waits 300 on rank 0, 0 on rank 1, over 2 rank-steps.
  for (const BreakdownRow& r : m.by_op)
    if (r.key == "all_gather") {
      CHECK(r.per_step_ms == Approx(350 * kNsToMs));       // (500 + 200) / 2
      CHECK(r.wait_per_step_ms == Approx(150 * kNsToMs));  // (300 + 0) / 2
    }
  // Against a prediction of the transfer only (one rank standing for both):
  // the diff compares transfer with transfer.
  Trace predicted;
  predicted.meta.source = Source::simulator;
  predicted.meta.world_size = 2;
  RankTrace& p = predicted.add_rank(0);
  p.represents = {0, 1};
  p.steps.push_back(Step{1, 0, 2000});
  const uint32_t comm = predicted.add_lane(p, "comm", LaneKind::comm);
  ev(predicted, p, comm, "all_gather h.0", Category::comm_all_gather, 400, 200, "h.0",
     "all_gather");
  ev(predicted, p, comm, "reduce_scatter h.0", Category::comm_reduce_scatter, 1100, 200, "h.0",
     "reduce_scatter");
  const Metrics pm = compute_metrics(predicted);
  CHECK_FALSE(pm.comm_split);
  CHECK(pm.total.comm_transfer_ms == Approx(400 * kNsToMs));
  CHECK(pm.total.comm_wait_ms == 0);
  bool notes_split = false;
  for (const std::string& n : pm.notes) notes_split |= n.find("not split") != std::string::npos;
  CHECK_FALSE(notes_split);  // the simulator's comm is all transfer: nothing to say
  const MetricsDiff d = diff_metrics(m, pm);
  bool seen = false;
  for (const RowDelta& r : d.by_op)
    if (r.key == "all_gather") {
      seen = true;
      CHECK(r.per_step_a_ms == Approx(200 * kNsToMs));  // 350 - 150 waiting
      CHECK(r.wait_per_step_a_ms == Approx(150 * kNsToMs));
      CHECK(r.relative == Approx(0).margin(1e-12));
    }
  CHECK(seen);
  bool transfer = false;
  for (const MetricDelta& x : d.metrics)
    if (x.name == "comm_transfer_ms") {
      transfer = true;
      CHECK(x.relative == Approx(0).margin(1e-12));  // 400 ns each
    }
  CHECK(transfer);
}

TEST_CASE("collectives: a trace without every rank, or with unequal counts, is not split",
          "[collectives]") {
  // Two ranks of a world of 4: the others' arrivals are unknown.
  const Metrics m = compute_metrics(two_ranks(4));
  CHECK_FALSE(m.comm_split);
  CHECK(m.total.comm_wait_ms == 0);
  CHECK(m.total.comm_transfer_ms == Approx(m.total.comm_ms));
  bool noted = false;
  for (const std::string& n : m.notes) noted |= n.find("holds 2 of 4 ranks") != std::string::npos;
  CHECK(noted);
  // Rank 1 runs one all_gather more: that name is left unmatched, the
  // reduce_scatter still splits.
  Trace t = two_ranks(2);
  RankTrace& r1 = t.ranks[1];
  ev(t, r1, 1, "all_gather h.0", Category::comm_all_gather, 1500, 100);
  const CollectiveMatch c = match_collectives(t);
  CHECK(c.split);
  CHECK(c.unmatched == 3);
  REQUIRE(c.collectives.size() == 1);
  CHECK(c.collectives[0].name == "reduce_scatter h.0");
}
