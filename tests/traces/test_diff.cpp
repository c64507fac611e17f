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
  REQUIRE(d.metrics.size() == 8);
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
  a.by_unit = {{"h.0", 2, 10, 5, 10}, {"h.1", 1, 3, 3, 3}};
  b.by_unit = {{"h.0", 2, 11, 5.5, 11}, {"h.2", 4, 8, 2, 8}};
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
  a.by_op = {{"tick", 4, 0, 0, 0}, {"gemm", 1, 3, 3, 3}};
  b.by_op = {{"tick", 5, 0, 0, 0}, {"gemm", 1, 3, 3, 3}, {"copy", 1, 1, 1, 1}};
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
