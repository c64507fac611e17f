// `shardscope simulate` end to end (the binary built with the tests).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"

using shardscope::test::run_cli;

TEST_CASE("simulate --json prints the metrics contract with source simulator", "[sim][cli]") {
  auto r = run_cli("simulate --model gpt2-tiny --world 2 --json");
  REQUIRE(r.status == 0);
  nlohmann::json j = nlohmann::json::parse(r.output);
  CHECK(j["source"] == "simulator");
  CHECK(j["world_size"] == 2);
  for (const char* key : {"step_time_ms", "peak_allocated_bytes", "peak_reserved_bytes",
                          "compute_ms", "comm_ms", "exposed_comm_ms", "overlap", "idle_ms"}) {
    INFO(key);
    CHECK(j.contains(key));
  }
  CHECK(j["fits"] == true);
  CHECK(j["step_time_ms"].get<double>() > 0);
  REQUIRE(j["ranks"].size() == 1);
}

TEST_CASE("simulate says does not fit under a tiny memory limit", "[sim][cli]") {
  auto r = run_cli("simulate --model gpt2-tiny --world 2 --mem-limit 1MiB");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("DOES NOT FIT"));
  auto t = run_cli("simulate --model gpt2-tiny --world 2");
  REQUIRE(t.status == 0);
  CHECK_THAT(t.output, Catch::Contains("fits in"));
  CHECK_THAT(t.output, Catch::Contains("peak allocated by category"));
}

TEST_CASE("simulate rejects an unknown hardware and a bad memory limit with status 2",
          "[sim][cli]") {
  CHECK(run_cli("simulate --model gpt2-tiny --hw no-such-gpu").status == 2);
  CHECK(run_cli("simulate --model gpt2-tiny --mem-limit lots").status == 2);
  CHECK(run_cli("simulate").status == 2);
}

TEST_CASE("simulate reports the rank classes that stand for the whole world", "[sim][cli]") {
  // Shard groups of 6 on nodes of 8: {0-5} and {18-23} sit in one node,
  // {6-11} and {12-17} straddle two, so their all-gathers cross InfiniBand.
  const std::string cmd =
      "simulate --model gpt2-tiny --world 24 --set shard_group_size=6 --set wrap.type=class "
      "--set 'wrap.classes=[\"GPT2Block\"]'";
  auto r = run_cli(cmd + " --json");
  REQUIRE(r.status == 0);
  const nlohmann::json j = nlohmann::json::parse(r.output);
  REQUIRE(j["rank_classes"].size() == 2);
  const nlohmann::json& one_node = j["rank_classes"][0];
  const nlohmann::json& two_nodes = j["rank_classes"][1];
  CHECK(one_node["rank"] == 0);
  CHECK(one_node["represents"] == nlohmann::json({0, 1, 2, 3, 4, 5, 18, 19, 20, 21, 22, 23}));
  CHECK(two_nodes["rank"] == 6);
  CHECK(two_nodes["represents"] == nlohmann::json({6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}));
  CHECK(two_nodes["step_time_ms"].get<double>() > one_node["step_time_ms"].get<double>());
  // The slowest class sets the step.
  CHECK(j["step_time_ms"].get<double>() ==
        Approx(two_nodes["step_time_ms"].get<double>()).epsilon(1e-12));
  // The peak's breakdowns by category and by unit cover the same bytes.
  int64_t by_category = 0, by_unit = 0;
  for (const auto& [k, v] : j["peak_breakdown"]["by_category"].items())
    by_category += v.get<int64_t>();
  for (const auto& [k, v] : j["peak_breakdown"]["by_unit"].items()) by_unit += v.get<int64_t>();
  CHECK(by_category == by_unit);
  CHECK(by_category == j["peak_allocated_bytes"].get<int64_t>());

  auto t = run_cli(cmd);
  REQUIRE(t.status == 0);
  CHECK_THAT(t.output, Catch::Contains("2 simulated rank(s) stand for all 24") &&
                           Catch::Contains("0-5,18-23") && Catch::Contains("6-17"));
}

TEST_CASE("the demo plans, simulates and sweeps", "[sim][cli]") {
  auto r = run_cli("demo");
  REQUIRE(r.status == 0);
  // Four GPT-2 policies with predicted step times, then the Llama-3-8B sweep:
  // 2^5 policies, all within 80 GiB at batch 1-2 on 64 ranks.
  CHECK_THAT(r.output, Catch::Contains("step ms") && Catch::Contains("peak resv") &&
                           Catch::Contains("DDP (shard_group_size 1)"));
  CHECK_THAT(r.output, Catch::Contains("32 policies") && Catch::Contains("32 fit") &&
                           Catch::Contains("highest throughput that fits"));
}
