// `shardscope plan` and the CLI contract, run as a user would.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"

using shardscope::test::run_cli;

TEST_CASE("plan --json prints the contract's fields", "[cli][plan]") {
  auto r = run_cli("plan --model gpt2-small --world 8 --json");
  REQUIRE(r.status == 0);
  nlohmann::json j = nlohmann::json::parse(r.output);
  CHECK(j["params_total"] == 124439808);
  CHECK(j["world_size"] == 8);
  REQUIRE(j["units"].size() == 1);
  CHECK(j["units"][0]["name"] == "<root>");
  CHECK(j["units"][0].contains("shard_numel"));
  CHECK(j["comm_bytes_per_rank"].contains("all_gather"));
  CHECK(j["comm_bytes_per_rank"].contains("reduce_scatter"));
  CHECK(j["comm_bytes_per_rank"].contains("all_reduce"));
  // AdamW fp32 with zero_grad(set_to_none=True), PyTorch's default: 12 bytes
  // per shard element (parameters and Adam state; gradients come and go).
  CHECK(j["persistent_bytes_per_rank"].get<int64_t>() ==
        12 * j["units"][0]["shard_numel"].get<int64_t>());
  CHECK(j["policy"]["zero_grad_set_to_none"] == true);
  auto kept = run_cli("plan --model gpt2-small --world 8 --json --set zero_grad_set_to_none=false");
  REQUIRE(kept.status == 0);
  nlohmann::json k = nlohmann::json::parse(kept.output);
  CHECK(k["persistent_bytes_per_rank"].get<int64_t>() ==
        16 * k["units"][0]["shard_numel"].get<int64_t>());
}

TEST_CASE("plan prints a unit table with --set overrides", "[cli][plan]") {
  auto r = run_cli(
      "plan --model gpt2-tiny --world 2 --set wrap.type=class "
      "--set 'wrap.classes=[\"GPT2Block\"]'");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("transformer.h.0"));
  CHECK_THAT(r.output, Catch::Contains("transformer.h.1"));
  CHECK_THAT(r.output, Catch::Contains("communication per rank per step"));
}

TEST_CASE("rejected policies exit 2 with the key named", "[cli][plan][validation]") {
  struct Case {
    std::string args, needle;
  };
  const std::vector<Case> cases = {
      {"--set reshard_after_forward=3", "reshard_after_forward"},
      {"--set shard_group_size=3", "shard_group_size"},
      {"--set backward_prefetch=post", "backward_prefetch"},
      {"--set nonsense=1", "nonsense"},
      {"--set flavor=fsdp3", "flavor"},
      {"--set world_size=4", "world_size"},
      {"--set seq_len=100000", "seq_len"},
      {"--set wrap.type=modules --set 'wrap.modules=[\"transformer.h.9\"]'", "transformer.h.9"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    auto r = run_cli("plan --model gpt2-tiny --world 8 " + c.args);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Catch::Contains(c.needle));
  }
}

TEST_CASE("usage errors exit 2, --help exits 0", "[cli]") {
  CHECK(run_cli("plan").status == 2);                     // missing --model
  CHECK(run_cli("plan --model nope-model").status == 2);  // unknown preset
  CHECK(run_cli("plan --model gpt2-tiny --world 0").status == 2);
  CHECK(run_cli("plan --model gpt2-tiny --bogus").status == 2);
  CHECK(run_cli("frobnicate").status == 2);
  CHECK(run_cli("plan --help").status == 0);
  CHECK(run_cli("--help").status == 0);
  for (const char* sub : {"simulate", "sweep", "run", "profile", "calibrate", "view", "demo"}) {
    INFO(sub);
    CHECK(run_cli(std::string(sub) + " --help").status == 0);
  }
}

TEST_CASE("plan --graph-out writes a graph that --model reads back", "[cli][plan][json]") {
  const auto dir = std::filesystem::temp_directory_path() / "shardscope_cli_graph";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "llama.json").string();
  auto w = run_cli("plan --model llama-tiny --world 2 --graph-out " + path + " --json");
  REQUIRE(w.status == 0);
  auto r = run_cli("plan --model " + path + " --world 2 --json");
  REQUIRE(r.status == 0);
  CHECK(nlohmann::json::parse(r.output)["params_total"] ==
        nlohmann::json::parse(w.output)["params_total"]);
  std::filesystem::remove_all(dir);
}

TEST_CASE("plan --schedule-out writes the schedule JSON", "[cli][plan][json]") {
  const auto dir = std::filesystem::temp_directory_path() / "shardscope_cli_sched";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "s.json").string();
  auto r = run_cli("plan --model gpt2-tiny --world 2 --schedule-out " + path);
  REQUIRE(r.status == 0);
  std::ifstream in(path);
  nlohmann::json s = nlohmann::json::parse(in);
  CHECK(s["format"] == "shardscope.schedule");
  CHECK(s["streams"][0] == "host");
  CHECK(s["ops"].size() > 10);
  std::filesystem::remove_all(dir);
}

TEST_CASE("JSON inputs: deep nesting, duplicate keys and directories exit 2 naming the flag",
          "[cli][json]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("shardscope-json-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string deep = (dir / "deep.json").string();
  std::ofstream(deep) << std::string(100000, '[') << std::string(100000, ']');
  const std::string dup = (dir / "dup.json").string();
  std::ofstream(dup) << R"({"batch_size": 2, "batch_size": 3})";
  struct Case {
    std::string args, message;
  };
  for (const Case& c : std::vector<Case>{
           {"simulate --model gpt2-tiny --world 2 --policy " + deep, "nested deeper than 128"},
           {"simulate --model gpt2-tiny --world 2 --policy " + dup, "duplicate key 'batch_size'"},
           {"simulate --model gpt2-tiny --world 2 --policy " + dir.string(), "is a directory"},
           {"simulate --model gpt2-tiny --world 2 --hw " + deep, "nested deeper than 128"},
           {"simulate --model " + deep + " --world 2", "nested deeper than 128"},
           {"sweep --model gpt2-tiny --world 2 --grid " + deep, "nested deeper than 128"},
           {"plan --model gpt2-tiny --world 2 --set 'wrap=" + std::string(300, '[') +
                std::string(300, ']') + "'",
            "--set wrap: nested deeper than 128"},
           {"plan --model gpt2-tiny --world 2 --set seed=18446744073709551615", "out of range"}}) {
    INFO(c.args.substr(0, 120));
    const shardscope::test::CliResult r = run_cli(c.args);
    INFO(r.output.substr(0, 400));
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Catch::Contains(c.message));
    CHECK(r.output.size() < 2000);  // no echo of the input
  }
  fs::remove_all(dir);
}

TEST_CASE("overrides regexes cannot crash or hang the planner (issue 34)",
          "[cli][plan][overrides][adversarial]") {
  namespace fs = std::filesystem;
  const std::string gpt2 =
      "plan --model gpt2-tiny --world 2 --set wrap.type=class "
      "--set 'wrap.classes=[\"GPT2Block\"]' ";
  // Parentheses nested 20,000 deep overflowed std::regex's recursion (exit
  // 139): --set, --policy and a sweep grid now name the nesting limit.
  const std::string deep = std::string(20000, '(') + "a" + std::string(20000, ')');
  const nlohmann::json overrides = {{{"units", deep}, {"reshard_after_forward", false}}};
  const auto set = run_cli(gpt2 + "--set 'overrides=" + overrides.dump() + "'");
  CHECK(set.status == 2);
  CHECK_THAT(set.output, Catch::Contains("policy: overrides[0].units: \"((((") &&
                             Catch::Contains("groups nest deeper than the limit of 16"));
  const fs::path dir = fs::temp_directory_path() / ("shardscope-regex-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string policy = (dir / "policy.json").string();
  std::ofstream(policy) << nlohmann::json{{"overrides", overrides}}.dump();
  const auto file = run_cli(gpt2 + "--policy " + policy);
  CHECK(file.status == 2);
  CHECK_THAT(file.output, Catch::Contains("groups nest deeper than the limit of 16"));
  const std::string grid = (dir / "grid.json").string();
  std::ofstream(grid) << nlohmann::json{{"overrides", {overrides}}}.dump();
  const auto sweep = run_cli("sweep --model gpt2-tiny --world 2 --grid " + grid);
  CHECK(sweep.status == 0);  // a rejected combination is counted, as any invalid one
  CHECK_THAT(sweep.output, Catch::Contains("1 x policy: overrides[0].units:") &&
                               Catch::Contains("groups nest deeper than the limit of 16"));
  fs::remove_all(dir);

  // (.*.*)*Z backtracked for minutes on these unit names; it matches none of
  // them (no 'Z'), which is the usual error.
  const auto none = run_cli(
      gpt2 + "--set 'overrides=[{\"units\":\"(.*.*)*Z\",\"reshard_after_forward\":false}]'");
  CHECK(none.status == 2);
  CHECK_THAT(none.output,
             Catch::Contains("overrides[0].units: the regex \"(.*.*)*Z\" matches no unit"));
  // The same shape matching one block: the plan is printed, and keeping
  // transformer.h.1 unsharded removes its backward all-gather, 1/2 x 4 B x
  // 49,984 parameters = 99,968 bytes per rank.
  const auto base = run_cli(gpt2 + "--json");
  const auto kept = run_cli(
      gpt2 + "--json --set 'overrides=[{\"units\":\"(.*.*)*1\",\"reshard_after_forward\":false}]'");
  REQUIRE(base.status == 0);
  REQUIRE(kept.status == 0);
  const auto ag = [](const std::string& out) {
    return nlohmann::json::parse(out)["comm_bytes_per_rank"]["all_gather"].get<int64_t>();
  };
  CHECK(ag(base.output) - ag(kept.output) == 99968);
  const auto table = run_cli(
      gpt2 + "--set 'overrides=[{\"units\":\"(a+)+$|(.*.*)*1\",\"reshard_after_forward\":false}]'");
  CHECK(table.status == 0);
  CHECK_THAT(table.output, Catch::Contains("transformer.h.1") &&
                               Catch::Contains("communication per rank per step"));
}

TEST_CASE("plan and simulate take an exported graph, and a stated wrap replaces its default",
          "[cli][plan][exported]") {
  const std::string model =
      std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/exported/tiny-mlp.graph.json";
  // default_wrap_classes ["MLPLayer"]: 544 and 1,024 parameters; the head's
  // 320 on the root. Each shard is half of dim 0 at world 2.
  auto r = run_cli("plan --model " + model + " --world 2 --json");
  INFO(r.output);
  REQUIRE(r.status == 0);
  nlohmann::json j = nlohmann::json::parse(r.output);
  CHECK(j["params_total"] == 1888);
  REQUIRE(j["units"].size() == 3);
  CHECK(j["units"][1]["name"] == "layers.0");
  CHECK(j["units"][1]["params"] == 544);
  CHECK(j["units"][2]["shard_numel"] == 512);
  r = run_cli("plan --model " + model +
              " --world 2 --json --set wrap.type=class --set 'wrap.classes=[\"Linear\"]'");
  REQUIRE(r.status == 0);
  j = nlohmann::json::parse(r.output);
  CHECK(j["units"].size() == 4);  // <root>, layers.0.fc, layers.1.fc, head
  r = run_cli("simulate --model " + model +
              " --world 2 --json --set wrap.type=class --set 'wrap.classes=[\"MLPLayer\"]'");
  REQUIRE(r.status == 0);
  CHECK(nlohmann::json::parse(r.output)["peak_allocated_bytes"].get<int64_t>() > 0);
  // The text form says where the units come from.
  r = run_cli("plan --model " + model + " --world 2");
  CHECK(r.status == 0);
  CHECK_THAT(r.output,
             Catch::Contains("wrap none (the exported graph's default_wrap_classes: MLPLayer)"));
}
