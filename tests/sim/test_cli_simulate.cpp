// `shardscope simulate` end to end (the binary built with the tests).
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

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
  CHECK_THAT(r.output, Catch::Contains("does not fit in 1.00 MiB"));
  CHECK_THAT(r.output, !Catch::Contains("step time "));
  auto t = run_cli("simulate --model gpt2-tiny --world 2");
  REQUIRE(t.status == 0);
  CHECK_THAT(t.output, Catch::Contains("fits in"));
  CHECK_THAT(t.output, Catch::Contains("step time "));
  CHECK_THAT(t.output, Catch::Contains("peak allocated by category"));
}

// gpt2-small, fsdp1 per block, under 1 GiB: the step runs (fsdp1's rate
// limiter makes the host wait for the GPU, so ops finish) and runs out of
// memory in the forward, after a few ms of simulated time. None of those ms
// may be printed as a step time.
const char* const kOutOfMemoryMidStep =
    "simulate --model gpt2-small --world 8 --set flavor=fsdp1 --set wrap.type=class "
    "--set 'wrap.classes=[\"GPT2Block\"]' --mem-limit 1GiB";

TEST_CASE("simulate: a step that does not fit prints why and no time or throughput", "[sim][cli]") {
  auto r = run_cli(std::string(kOutOfMemoryMidStep) + " --json");
  REQUIRE(r.status == 0);
  const nlohmann::json j = nlohmann::json::parse(r.output);
  REQUIRE(j["fits"] == false);
  CHECK(j["sim_events"].get<int64_t>() > 0);  // a partial step with times to hide
  CHECK(j["peaks_up_to_failure"] == true);
  const std::string buffer = j["oom_buffer"].get<std::string>();
  CHECK_FALSE(buffer.empty());
  CHECK(j["oom_bytes"].get<int64_t>() > 0);
  CHECK(j["oom_rank"] == 0);
  CHECK(j["oom_reserved_bytes"].get<int64_t>() <= int64_t{1} << 30);
  CHECK(j["oom_allocated_bytes"].get<int64_t>() > 0);
  CHECK_THAT(j["oom_message"].get<std::string>(), Catch::Contains("out of memory"));
  CHECK(j["memory_limit_bytes"] == int64_t{1} << 30);
  // Every time field null: top level, ranks, steps, rank classes, breakdowns.
  const char* const times[] = {"step_time_ms",    "compute_ms", "comm_ms",
                               "exposed_comm_ms", "overlap",    "idle_ms"};
  std::vector<nlohmann::json> values = {j};
  for (const nlohmann::json& x : j["ranks"]) values.push_back(x);
  for (const nlohmann::json& x : j["steps"]) values.push_back(x);
  REQUIRE(values.size() == 3);
  for (const nlohmann::json& v : values) {
    for (const char* key : times) {
      INFO(key << " in " << v.dump().substr(0, 200));
      REQUIRE(v.contains(key));
      CHECK(v[key].is_null());
    }
    // The peaks up to the failure are real.
    CHECK(v["peak_allocated_bytes"].get<int64_t>() > 0);
  }
  for (const nlohmann::json& c : j["rank_classes"]) {
    CHECK(c["fits"] == false);
    CHECK(c["step_time_ms"].is_null());
    CHECK(c["peak_allocated_bytes"].get<int64_t>() > 0);
  }
  size_t rows = 0;
  for (const nlohmann::json& list : j["breakdown"])
    for (const nlohmann::json& row : list) {
      ++rows;
      for (const char* key : {"total_ms", "mean_ms", "self_ms"}) CHECK(row[key].is_null());
    }
  CHECK(rows > 0);
  CHECK(j["peak_allocated_bytes"] == j["rank_classes"][0]["peak_allocated_bytes"]);

  auto t = run_cli(kOutOfMemoryMidStep);
  REQUIRE(t.status == 0);
  CHECK_THAT(t.output, Catch::Contains("does not fit in 1.00 GiB: rank 0 ran out of memory "
                                       "allocating '" +
                                       buffer + "'"));
  CHECK_THAT(t.output, Catch::Contains("at the failure: allocated ") &&
                           Catch::Contains("allocator: out of memory"));
  CHECK_THAT(t.output, Catch::Contains("(up to the failure)"));
  for (const char* line : {"step time ", "compute  ", "communication  ", "idle  ", "fits in",
                           "tokens/s", "host time"}) {
    INFO(line);
    CHECK_THAT(t.output, !Catch::Contains(line));
  }
}

TEST_CASE("simulate: rank classes of a step that does not fit show no step time", "[sim][cli]") {
  const std::string cmd =
      "simulate --model gpt2-tiny --world 24 --set shard_group_size=6 --set wrap.type=class "
      "--set 'wrap.classes=[\"GPT2Block\"]' --mem-limit 1MiB";
  auto t = run_cli(cmd);
  REQUIRE(t.status == 0);
  // "rank, stands for, step ms, peaks, status": no step ms, "does not fit".
  size_t class_lines = 0;
  std::istringstream lines(t.output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string rank, stands_for, step_ms;
    words >> rank >> stands_for >> step_ms;
    if (stands_for != "0-5,18-23" && stands_for != "6-17") continue;
    ++class_lines;
    INFO(line);
    CHECK(step_ms == "-");
    CHECK_THAT(line, Catch::EndsWith("  does not fit"));
  }
  CHECK(class_lines == 2);
  const nlohmann::json j = nlohmann::json::parse(run_cli(cmd + " --json").output);
  REQUIRE(j["rank_classes"].size() == 2);
  for (const nlohmann::json& c : j["rank_classes"]) CHECK(c["step_time_ms"].is_null());
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

// llama-tiny: 4 query heads over 2 KV heads, fp32 by default. On an H200
// (sm_90) PyTorch 2.11 refuses cuDNN and flash (fp32) and memory-efficient
// (grouped KV heads) and runs math; on the CPU its flash kernel
// (plan/sdpa.h, docs/models.md "The attention kernel PyTorch picks").
TEST_CASE("simulate names the SDPA kernel PyTorch picks on the hardware", "[sim][cli][sdpa]") {
  const std::string base = "simulate --model llama-tiny --world 2 --set batch_size=2 --json";
  auto gpu = run_cli(base + " --hw h200-sxm");
  REQUIRE(gpu.status == 0);
  const nlohmann::json g = nlohmann::json::parse(gpu.output);
  CHECK(g["device"] == "sm_90");
  REQUIRE(g["attention_kernels"].size() == 1);
  CHECK(g["attention_kernels"][0]["kernel"] == "math");
  CHECK(g["attention_kernels"][0]["ops"].size() == 2);
  CHECK_THAT(g["attention_kernels"][0]["refused"].get<std::string>(),
             Catch::Contains("efficient: grouped KV heads (4 query heads over 2"));
  auto cpu = run_cli(base + " --hw cpu-local");
  REQUIRE(cpu.status == 0);
  const nlohmann::json c = nlohmann::json::parse(cpu.output);
  CHECK(c["device"] == "cpu");
  CHECK(c["attention_kernels"][0]["kernel"] == "flash_cpu");
  CHECK(c["attention_kernels"][0]["refused"].is_null());
  // The math kernel keeps the T x T probabilities: more memory on the GPU.
  CHECK(g["peak_requested_bytes"].get<int64_t>() > c["peak_requested_bytes"].get<int64_t>());
  auto bf16 = run_cli(base + " --hw h200-sxm --set mixed_precision.param_dtype=bf16");
  REQUIRE(bf16.status == 0);
  CHECK(nlohmann::json::parse(bf16.output)["attention_kernels"][0]["kernel"] == "cudnn");
  auto a100 = run_cli(base + " --hw a100-sxm --set mixed_precision.param_dtype=bf16");
  REQUIRE(a100.status == 0);
  CHECK(nlohmann::json::parse(a100.output)["attention_kernels"][0]["kernel"] == "flash");
  auto text = run_cli("simulate --model llama-tiny --world 2 --hw h200-sxm");
  REQUIRE(text.status == 0);
  CHECK_THAT(text.output, Catch::Contains("attention kernels (scaled_dot_product_attention on "
                                          "sm_90):\n  math       2 op(s), e.g. "
                                          "model.layers.0.self_attn.attention"));
}

TEST_CASE("simulate: attention.sdpa_backend forces a kernel or refuses with the reason",
          "[sim][cli][sdpa]") {
  const std::string base = "simulate --model llama-tiny --world 2 --hw h200-sxm";
  auto math = run_cli(base +
                      " --set attention.sdpa_backend=math --set "
                      "mixed_precision.param_dtype=bf16 --json");
  REQUIRE(math.status == 0);
  CHECK(nlohmann::json::parse(math.output)["attention_kernels"][0]["kernel"] == "math");
  auto efficient = run_cli(base + " --set attention.sdpa_backend=efficient");
  CHECK(efficient.status == 2);
  CHECK_THAT(efficient.output,
             Catch::Contains("policy: attention.sdpa_backend: \"efficient\" cannot run on sm_90: "
                             "grouped KV heads (4 query heads over 2; no enable_gqa support) "
                             "(attention op model.layers.0.self_attn.attention, f32)"));
  auto unknown = run_cli(base + " --set attention.sdpa_backend=fast");
  CHECK(unknown.status == 2);
  CHECK_THAT(unknown.output,
             Catch::Contains("policy: attention.sdpa_backend: unknown value \"fast\" (use auto, "
                             "flash, efficient, cudnn or math)"));
  auto cpu = run_cli(
      "simulate --model llama-tiny --world 2 --hw cpu-local "
      "--set attention.sdpa_backend=cudnn");
  CHECK(cpu.status == 2);
  CHECK_THAT(cpu.output, Catch::Contains("\"cudnn\" cannot run on cpu: no such CPU kernel"));
}
