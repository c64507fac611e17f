// Diff of two metric sets: deltas, relative changes, ordering, breakdown rows.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/traces/sample_traces.h"
#include "traces/diff.h"
#include "traces/metrics.h"

using namespace shardscope::traces;

TEST_CASE("diff: absolute and relative deltas, largest relative change first", "[diff]") {
  Metrics a, b;
  a.total.step_time_ms = 10;
  b.total.step_time_ms = 12;  // +20%
  a.total.comm_ms = 4;
  b.total.comm_ms = 2;  // -50%
  a.total.idle_ms = 0;
  b.total.idle_ms = 1;  // from zero: no relative change, listed first
  a.total.peak_allocated_bytes = 1000;
  b.total.peak_allocated_bytes = 1000;  // unchanged: last
  const MetricsDiff d = diff_metrics(a, b);
  REQUIRE(d.metrics.size() == 10);
  CHECK(d.metrics[0].name == "idle_ms");
  CHECK_FALSE(d.metrics[0].has_relative);
  CHECK(d.metrics[1].name == "comm_ms");
  CHECK(d.metrics[1].delta == Approx(-2));
  CHECK(d.metrics[1].relative == Approx(-0.5));
  CHECK(d.metrics[2].name == "step_time_ms");
  CHECK(d.metrics[2].relative == Approx(0.2));
  const nlohmann::json j = diff_to_json(d);
  CHECK(j["metrics"][0]["relative"].is_null());
  CHECK(j["metrics"][1]["b"] == 2.0);
}

TEST_CASE("diff: breakdown rows by key, present in either side, largest delta first", "[diff]") {
  Metrics a, b;
  a.by_unit = {{"h.0", 2, 10, 5, 10, 2, 10, 10}, {"h.1", 1, 3, 3, 3, 1, 3, 3}};
  b.by_unit = {{"h.0", 2, 11, 5.5, 11, 2, 11, 11}, {"h.2", 4, 8, 2, 8, 4, 8, 8}};
  const MetricsDiff d = diff_metrics(a, b);
  REQUIRE(d.by_unit.size() == 3);
  CHECK(d.by_unit[0].key == "h.2");  // +8
  CHECK_FALSE(d.by_unit[0].has_relative);
  CHECK(d.by_unit[1].key == "h.1");  // -3
  CHECK(d.by_unit[1].count_b == 0);
  CHECK(d.by_unit[2].key == "h.0");  // +1
  CHECK(d.by_unit[2].relative == Approx(0.1));
}

TEST_CASE("diff of a trace with itself is all zeros", "[diff]") {
  const Metrics m = compute_metrics(testing::sample_trace());
  const MetricsDiff d = diff_metrics(m, m);
  for (const MetricDelta& x : d.metrics) CHECK(x.delta == 0);
  REQUIRE(d.ranks.size() == 2);
  for (const RowDelta& r : d.by_op) CHECK(r.delta_ms == 0);
  CHECK(format_diff(d).find("step_time_ms") != std::string::npos);
}

TEST_CASE("diff: a metric or row that is 0 in both traces reads '=', 0 to nonzero 'new'",
          "[diff]") {
  Metrics a, b;
  a.total.step_time_ms = 10;
  b.total.step_time_ms = 10;  // unchanged, nonzero: +0.0%
  a.total.comm_ms = 0;
  b.total.comm_ms = 0;  // 0 -> 0: "=" (was "new")
  a.total.idle_ms = 0;
  b.total.idle_ms = 2;  // 0 -> 2: "new"
  a.by_op = {{"tick", 4, 0, 0, 0, 4, 0, 0}, {"gemm", 1, 3, 3, 3, 1, 3, 3}};
  b.by_op = {
      {"tick", 5, 0, 0, 0, 5, 0, 0}, {"gemm", 1, 3, 3, 3, 1, 3, 3}, {"copy", 1, 1, 1, 1, 1, 1, 1}};
  const MetricsDiff d = diff_metrics(a, b);
  const std::string text = format_diff(d);
  // The change column is the last field of the line that starts with `name`.
  const auto change_of = [&](const std::string& name) {
    const size_t at = text.find("\n" + name + " ");
    REQUIRE(at != std::string::npos);
    const std::string line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
    return line.substr(line.find_last_of(' ') + 1);
  };
  CHECK(change_of("comm_ms") == "=");
  CHECK(change_of("exposed_comm_ms") == "=");
  CHECK(change_of("idle_ms") == "new");
  CHECK(change_of("step_time_ms") == "+0.0%");
  CHECK(change_of("tick") == "=");  // 0 ms in both, though counted 4 and 5 times
  CHECK(change_of("copy") == "new");
  CHECK(change_of("gemm") == "+0.0%");
  // The JSON keeps relative null for 0 -> 0 (0 / 0 is undefined).
  for (const MetricDelta& m : d.metrics)
    if (m.name == "comm_ms") CHECK_FALSE(m.has_relative);
}

namespace {

// `ranks` ranks (or one simulated rank standing for them) of `steps` steps
// of 1 ms each; every step runs a 0.2 ms all_gather then a 0.5 ms linear.
Trace fsdp_like(int ranks, int steps, bool simulated) {
  Trace t;
  t.meta.source = simulated ? Source::simulator : Source::engine_cpu;
  t.meta.world_size = ranks;
  for (int32_t rank = 0; rank < (simulated ? 1 : ranks); ++rank) {
    RankTrace& r = t.add_rank(rank);
    if (simulated)
      for (int32_t k = 0; k < ranks; ++k) r.represents.push_back(k);
    const uint32_t compute = t.add_lane(r, "compute", LaneKind::compute);
    const uint32_t comm = t.add_lane(r, "comm", LaneKind::comm);
    for (int k = 0; k < steps; ++k) {
      const int64_t start = k * 1'000'000;
      r.steps.push_back(Step{k + 1, start, start + 1'000'000});
      testing::ev(t, r, comm, "all_gather h.0", Category::comm_all_gather, start, 200'000, "h.0",
                  "all_gather");
      testing::ev(t, r, compute, "h.0.fc fwd", Category::compute, start + 200'000, 500'000, "h.0",
                  "linear");
    }
  }
  return t;
}

}  // namespace

TEST_CASE("diff: measured 2 ranks x 10 steps against one simulated step compare per step",
          "[diff]") {
  const Metrics measured = compute_metrics(fsdp_like(2, 10, false));
  const Metrics predicted = compute_metrics(fsdp_like(2, 1, true));
  CHECK(measured.rank_steps == 18);  // 2 ranks x steps 2..10
  CHECK(predicted.rank_steps == 2);  // one step of a rank standing for 2
  const MetricsDiff d = diff_metrics(measured, predicted);
  REQUIRE(d.by_op.size() == 2);
  for (const RowDelta& r : d.by_op) {
    INFO(r.key);
    CHECK(r.count_a == 18);
    CHECK(r.count_b == 1);
    CHECK(r.count_per_step_a == 1);
    CHECK(r.count_per_step_b == 1);
    CHECK(r.per_step_a_ms == Approx(r.key == "linear" ? 0.5 : 0.2));
    CHECK(r.delta_ms == Approx(0).margin(1e-12));
    CHECK(r.relative == Approx(0).margin(1e-12));
  }
  // Ranks: measured 0 and 1 each against the simulated rank that represents them.
  REQUIRE(d.ranks.size() == 2);
  CHECK(d.ranks[1].first == 1);
  for (const auto& [rank, list] : d.ranks)
    for (const MetricDelta& m : list) CHECK(m.delta == Approx(0).margin(1e-12));
  // The headline comm agrees with the all_gather row (one per step, unions = sums here).
  for (const RowDelta& r : d.by_op)
    if (r.key == "all_gather") CHECK(measured.total.comm_ms == Approx(r.per_step_a_ms));
}

TEST_CASE("diff: 4 steps against 10 steps of the same run compare at 0%", "[diff]") {
  const MetricsDiff d = diff_metrics(compute_metrics(fsdp_like(2, 4, false)),
                                     compute_metrics(fsdp_like(2, 10, false)));
  for (const auto* rows : {&d.by_unit, &d.by_op, &d.by_category})
    for (const RowDelta& r : *rows) {
      INFO(r.key);
      CHECK(r.count_a * 3 == r.count_b * 1);  // 2 x 3 against 2 x 9 reported steps
      CHECK(r.relative == Approx(0).margin(1e-12));
    }
  for (const MetricDelta& m : d.metrics) CHECK(m.delta == Approx(0).margin(1e-12));
}
