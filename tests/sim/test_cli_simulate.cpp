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
