// `shardscope simulate ARGS --json`, required to succeed, parsed: for tests
// that check simulate's JSON fields.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"

namespace shardscope::test {

inline nlohmann::json simulate_json(const std::string& args) {
  const CliResult r = run_cli("simulate " + args + " --json");
  INFO(r.output);
  REQUIRE(r.status == 0);
  return nlohmann::json::parse(r.output);
}

}  // namespace shardscope::test
