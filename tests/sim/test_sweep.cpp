// What-if sweeps: grid parsing and expansion, rejection counting, ranking,
// the Pareto front, thread-count independence, the CLI and its outputs (limits
// and streaming: test_sweep_limits.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/models.h"
#include "plan/policy_keys.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "sim/simulator.h"
#include "sim/sweep.h"
#include "tests/cli/run_cli.h"
#include "tests/sim/sweep_fixtures.h"
#include "tests/temp_dir.h"

using namespace shardscope;
using nlohmann::json;
using test::run_cli;
using test::sweep::base_policy;
using test::sweep::small_grid;

namespace {

std::string error_of(const json& doc) {
  try {
    sim::grid_from_json(doc, "g.json");
  } catch (const sim::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("grid_from_json names the offending key", "[sim][sweep]") {
  CHECK_THAT(error_of(json::array()), Catch::Contains("must be a JSON object"));
  CHECK_THAT(error_of({{"world_size", {8, 16}}}), Catch::Contains("--world"));
  CHECK_THAT(error_of({{"reshard", {true}}}), Catch::Contains("'reshard' is not a policy key"));
  CHECK_THAT(error_of({{"flavor", json::array()}}),
             Catch::Contains("'flavor' must be a non-empty"));
  CHECK_THAT(error_of({{"flavor", "fsdp1"}}), Catch::Contains("'flavor' must be a non-empty"));
  CHECK(error_of({{"mixed_precision.param_dtype", {"bf16"}}}).empty());
  // Every sweepable row of the policy key table is a grid key, including the
  // ones policy_to_json writes only when set (overrides, token_balance, ...).
  for (const plan::PolicyKey& k : plan::policy_keys()) {
    INFO(k.name);
    CHECK(error_of({{k.name, {nullptr}}}).empty() == k.sweepable);
  }
}

TEST_CASE("grid_policy enumerates the product with the last axis fastest", "[sim][sweep]") {
  // Axes in key order: cpu_offload (2 values), mixed_precision.param_dtype (3).
  const sim::SweepGrid g = sim::grid_from_json(
      {{"mixed_precision.param_dtype", {"fp32", "bf16", "fp16"}}, {"cpu_offload", {false, true}}});
  REQUIRE(g.size() == 6);
  const json base = {{"seq_len", 32}, {"mixed_precision", nullptr}};
  CHECK(sim::grid_policy(g, base, 0) == json{{"seq_len", 32},
                                             {"cpu_offload", false},
                                             {"mixed_precision", {{"param_dtype", "fp32"}}}});
  CHECK(sim::grid_policy(g, base, 4) == json{{"seq_len", 32},
                                             {"cpu_offload", true},
                                             {"mixed_precision", {{"param_dtype", "bf16"}}}});
  CHECK(sim::grid_policy(g, base, 5)["mixed_precision"]["param_dtype"] == "fp16");
  CHECK(sim::grid_from_json(json::object()).size() == 1);
}

TEST_CASE("a sweep counts rejections, ranks what fits and marks the Pareto front", "[sim][sweep]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  const sim::SweepGrid grid = sim::grid_from_json(small_grid());
  sim::SweepOptions o;
  o.worlds = {2, 4};
  o.base_policy = base_policy();
  o.threads = 1;
  const sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  const sim::SweepResult r = sim::run_sweep(g, grid, hw, o);
  REQUIRE(r.points.size() == 32);
  // fsdp2 x limit_all_gathers=true: 2 reshard x 2 checkpointing x 2 worlds.
  CHECK(r.rejected == 8);
  for (const sim::SweepPoint& p : r.points) {
    INFO(p.policy.dump());
    CHECK(p.rejected == (p.policy["flavor"] == "fsdp2" && p.policy["limit_all_gathers"] == true));
    if (p.rejected) CHECK_THAT(p.reason, Catch::Contains("limit_all_gathers"));
  }
  // Everything fits on an 80 GiB GPU: the ranking holds the other 24, highest
  // throughput first. Tokens per step = world x batch 1 x seq 64 x 1 micro-step.
  REQUIRE(r.ranking.size() == 24);
  for (size_t k = 1; k < r.ranking.size(); ++k)
    CHECK(r.points[r.ranking[k - 1]].tokens_per_s >= r.points[r.ranking[k]].tokens_per_s);
  for (size_t i : r.ranking) {
    const sim::SweepPoint& p = r.points[i];
    CHECK(p.tokens_per_step == p.world * 64);
    CHECK(p.tokens_per_s ==
          Approx(static_cast<double>(p.tokens_per_step) / (p.metrics.step_time_ms / 1e3)));
  }
  CHECK(r.best == static_cast<int64_t>(r.ranking.front()));
  // Pareto: no point that fits is strictly better in one objective and no
  // worse in the other than a front point; every other point is dominated
  // (weakly) by a front point.
  size_t front = 0;
  for (size_t i : r.ranking) {
    const sim::SweepPoint& p = r.points[i];
    bool dominated = false;
    for (size_t j : r.ranking) {
      const sim::SweepPoint& q = r.points[j];
      const bool no_worse = q.tokens_per_s >= p.tokens_per_s &&
                            q.metrics.peak_reserved_bytes <= p.metrics.peak_reserved_bytes;
      const bool better = q.tokens_per_s > p.tokens_per_s ||
                          q.metrics.peak_reserved_bytes < p.metrics.peak_reserved_bytes;
      if (no_worse && better) dominated = true;
    }
    if (p.pareto) {
      ++front;
      CHECK_FALSE(dominated);
    } else {
      bool covered = false;
      for (size_t j : r.ranking)
        if (r.points[j].pareto && r.points[j].tokens_per_s >= p.tokens_per_s &&
            r.points[j].metrics.peak_reserved_bytes <= p.metrics.peak_reserved_bytes)
          covered = true;
      CHECK(covered);
    }
  }
  CHECK(front >= 1);
  CHECK(r.points[static_cast<size_t>(r.best)].pareto);
  // The baseline is the base policy at the best's world.
  REQUIRE(r.has_baseline);
  CHECK(r.baseline.world == r.points[static_cast<size_t>(r.best)].world);
  CHECK(r.baseline.policy == base_policy());
}

TEST_CASE("sweep results are identical for 1, 2 and 3 threads", "[sim][sweep]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  const sim::SweepGrid grid = sim::grid_from_json(small_grid());
  sim::SweepOptions o;
  o.worlds = {2, 8};
  o.base_policy = base_policy();
  const sim::HardwareModel hw = sim::hardware_preset("a100-sxm");
  auto dump = [&](int threads) {
    o.threads = threads;
    const sim::SweepResult r = sim::run_sweep(g, grid, hw, o);
    json j = json::array();
    for (const sim::SweepPoint& p : r.points)
      j.push_back({p.config, p.world, p.policy, p.rejected, p.fits, p.pareto,
                   p.metrics.step_time_ms, p.metrics.peak_reserved_bytes,
                   p.metrics.peak_allocated_bytes, p.metrics.overlap, p.sim_events});
    j.push_back(r.best);
    return j.dump();
  };
  const std::string one = dump(1);
  CHECK(dump(2) == one);
  CHECK(dump(3) == one);
}

TEST_CASE("sweep points equal full simulations, also when persistent state alone overflows",
          "[sim][sweep]") {
  // gpt2-small on 8 ranks under 1.5 GiB: DDP's 16 Psi = 1.85 GiB of persistent
  // state cannot fit (the sweep answers from the persistent buffers alone),
  // shard groups of 2 (0.46 GiB) and 8 (0.12 GiB) get past them.
  const plan::Graph g = plan::load_model("gpt2-small");
  const sim::SweepGrid grid = sim::grid_from_json(
      {{"shard_group_size", {1, 2, 8}}, {"activation_checkpointing", {"none", "full"}}});
  sim::SweepOptions o;
  o.worlds = {8};
  o.base_policy = {{"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}, {"seq_len", 1024}};
  o.memory_limit_bytes = int64_t{3} << 29;  // 1.5 GiB
  o.threads = 1;
  const sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  const sim::SweepResult r = sim::run_sweep(g, grid, hw, o);
  REQUIRE(r.points.size() == 6);
  size_t persistent_oom = 0;
  for (const sim::SweepPoint& p : r.points) {
    INFO(p.policy.dump());
    REQUIRE_FALSE(p.rejected);
    const plan::Policy policy = plan::policy_from_json(p.policy);
    const plan::World w = plan::validate_policy(policy, g, 8);
    const plan::UnitPlan units = plan::build_units(g, policy, w);
    const plan::Schedule s = plan::build_schedule(g, policy, units, 0);
    sim::SimOptions so;
    so.memory_limit_bytes = o.memory_limit_bytes;
    so.record_trace = false;
    const sim::SimResult full = sim::simulate(g, units, s, hw, so);
    CHECK(p.fits == full.fits);
    CHECK(p.oom_buffer == full.oom_buffer);
    CHECK(p.metrics.step_time_ms == full.metrics.total.step_time_ms);
    CHECK(p.metrics.peak_reserved_bytes == full.metrics.total.peak_reserved_bytes);
    CHECK(p.metrics.peak_allocated_bytes == full.metrics.total.peak_allocated_bytes);
    CHECK(p.sim_events == full.sim_events);
    CHECK(p.rank_classes == full.rank_classes.size());
    if (p.policy["shard_group_size"] == 1) {
      CHECK_FALSE(p.fits);
      CHECK(p.sim_events == 0);  // failed before the step's first event
      ++persistent_oom;
    }
  }
  CHECK(persistent_oom == 2);
  CHECK(r.ranking.size() >= 1);
}

TEST_CASE("a configuration whose sizes overflow int64 is rejected, not fatal", "[sim][sweep]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  const sim::SweepGrid grid = sim::grid_from_json({{"batch_size", {1, int64_t{1000000000000000}}}});
  sim::SweepOptions o;
  o.worlds = {2};
  o.base_policy = base_policy();
  o.threads = 1;
  const sim::SweepResult r = sim::run_sweep(g, grid, sim::hardware_preset("h100-sxm"), o);
  REQUIRE(r.points.size() == 2);
  CHECK_FALSE(r.points[0].rejected);
  CHECK(r.points[0].fits);
  CHECK(r.points[1].rejected);
  // Refused by batch_size's limit (plan::kMaxBatchSize) before any size is evaluated.
  CHECK_THAT(r.points[1].reason,
             Catch::StartsWith("policy: batch_size: 1000000000000000 exceeds the limit 1048576"));
  CHECK(r.rejected == 1);
  CHECK(r.best == 0);
}

TEST_CASE("a sweep where nothing fits has no best", "[sim][sweep]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  sim::SweepOptions o;
  o.worlds = {2};
  o.base_policy = base_policy();
  o.memory_limit_bytes = 1 << 20;  // 1 MiB: less than the persistent state
  const sim::SweepResult r =
      sim::run_sweep(g, sim::grid_from_json(small_grid()), sim::hardware_preset("h100-sxm"), o);
  CHECK(r.ranking.empty());
  CHECK(r.best == -1);
  CHECK_FALSE(r.has_baseline);
  for (const sim::SweepPoint& p : r.points) CHECK_FALSE(p.fits);
  CHECK_THROWS_AS(sim::run_sweep(g, sim::SweepGrid{}, sim::hardware_preset("h100-sxm"),
                                 sim::SweepOptions{{}, json::object(), 0, 1, {}}),
                  sim::Error);
}

TEST_CASE("policy_differences lists changed dotted keys with defaults written out",
          "[sim][sweep]") {
  const std::vector<std::string> d =
      sim::policy_differences(json::object(), {{"flavor", "fsdp1"}, {"cpu_offload", true}});
  // fsdp1's defaults differ from fsdp2's only where the flavor says so.
  CHECK(std::find(d.begin(), d.end(), "cpu_offload: false -> true") != d.end());
  CHECK(std::find(d.begin(), d.end(), "flavor: \"fsdp2\" -> \"fsdp1\"") != d.end());
  CHECK(sim::policy_differences({{"seq_len", 8}}, {{"seq_len", 8}}).empty());
}

TEST_CASE("sweep CLI: JSON contract, CSV and JSON files, errors", "[sim][sweep][cli]") {
  test::TempDir dir("sweep");
  const std::string grid = dir.write("grid.json", small_grid());
  const std::string base = dir.write("base.json", base_policy());
  const std::string common =
      "sweep --model gpt2-tiny --policy " + base + " --grid " + grid + " --world 2,4 --threads 2";
  auto r = run_cli(common + " --json");
  REQUIRE(r.status == 0);
  const json j = json::parse(r.output);
  CHECK(j["model"] == "gpt2-tiny");
  CHECK(j["hw"] == "h100-sxm");
  CHECK(j["worlds"] == json({2, 4}));
  CHECK(j["rejected"] == 8);
  REQUIRE(j["configs"].size() == 24);
  const json& best = j["configs"][j["best"].get<size_t>()];
  CHECK(best["fits"] == true);
  CHECK(best["pareto"] == true);
  for (const json& c : j["configs"])
    if (c["fits"] == true)
      CHECK(c["tokens_per_s"].get<double>() <= best["tokens_per_s"].get<double>());
  for (const char* key : {"world", "policy", "metrics", "fits", "pareto", "tokens_per_step"})
    CHECK(best.contains(key));

  const std::string csv = (dir.path / "out.csv").string();
  REQUIRE(run_cli(common + " --out " + csv).status == 0);
  std::ifstream in(csv);
  std::string header;
  std::getline(in, header);
  CHECK_THAT(header, Catch::StartsWith("config,world,\"activation_checkpointing\",\"flavor\""));
  size_t rows = 0;
  for (std::string line; std::getline(in, line);) ++rows;
  CHECK(rows == 32);  // every configuration, rejected included

  const std::string out_json = (dir.path / "out.json").string();
  auto t = run_cli(common + " --out " + out_json);
  REQUIRE(t.status == 0);
  CHECK_THAT(t.output, Catch::Contains("recommended (world"));
  CHECK_THAT(t.output, Catch::Contains("Pareto front"));
  std::ifstream jf(out_json);
  std::stringstream file_text;
  file_text << jf.rdbuf();
  CHECK(json::parse(file_text.str())["configs"].size() == 24);
  // Streamed from the results on disk, yet byte for byte the whole document's dump.
  CHECK(file_text.str() == json::parse(file_text.str()).dump(1) + "\n");
  CHECK(r.output == j.dump(2) + "\n");

  auto bad = run_cli("sweep --model gpt2-tiny --grid " + dir.write("bad.json", {{"nope", {1}}}));
  CHECK(bad.status == 2);
  CHECK_THAT(bad.output, Catch::Contains("'nope' is not a policy key"));
  CHECK(run_cli(common + " --world 2,x").status == 2);
  CHECK(run_cli("sweep --model gpt2-tiny").status == 2);
  CHECK(run_cli(common + " --out " + (dir.path / "no/such/dir/x.csv").string()).status == 2);
}

namespace {

// One CSV record (RFC 4180 quoting, as cmd_sweep writes it).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      out.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

// gpt2-small on 8 ranks, per block, under 1.5 GiB: without checkpointing the
// step runs out of memory in the forward, after some simulated ms (fsdp1's
// rate limiter makes the host wait, so ops run before the failure); fsdp2
// with limit_all_gathers is rejected.
json out_of_memory_grid() {
  return {{"flavor", {"fsdp1", "fsdp2"}},
          {"limit_all_gathers", {true, false}},
          {"activation_checkpointing", {"none", "full"}}};
}

const char* const kTimeFields[] = {"step_time_ms",    "compute_ms", "comm_ms",
                                   "exposed_comm_ms", "overlap",    "idle_ms"};

}  // namespace

TEST_CASE("a sweep point that does not fit has no throughput", "[sim][sweep]") {
  const plan::Graph g = plan::load_model("gpt2-small");
  sim::SweepOptions o;
  o.worlds = {8};
  o.base_policy = {{"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}};
  o.memory_limit_bytes = int64_t{3} << 29;
  o.threads = 1;
  const sim::SweepResult r = sim::run_sweep(g, sim::grid_from_json(out_of_memory_grid()),
                                            sim::hardware_preset("h100-sxm"), o);
  size_t out_of_memory_mid_step = 0;
  for (const sim::SweepPoint& p : r.points) {
    if (p.rejected || p.fits) continue;
    INFO(p.policy.dump());
    CHECK(p.tokens_per_s == 0);
    CHECK_FALSE(p.pareto);
    CHECK(std::find(r.ranking.begin(), r.ranking.end(), p.config) == r.ranking.end());
    // The partial step has a time; it must not become a throughput.
    if (p.metrics.step_time_ms > 0) ++out_of_memory_mid_step;
  }
  CHECK(out_of_memory_mid_step >= 1);
  CHECK(r.ranking.size() == 3);
}

TEST_CASE("sweep CLI: configurations that do not fit have no time or throughput",
          "[sim][sweep][cli]") {
  test::TempDir dir("sweep_oom");
  const std::string grid = dir.write("grid.json", out_of_memory_grid());
  const std::string common =
      "sweep --model gpt2-small --world 8 --grid " + grid +
      " --set wrap.type=class --set 'wrap.classes=[\"GPT2Block\"]' --mem-limit 1536MiB --threads 2";

  // JSON: null times and throughput, the peaks up to the failure, why.
  const std::string out_json = (dir.path / "out.json").string();
  auto r = run_cli(common + " --json --out " + out_json);
  REQUIRE(r.status == 0);
  const json j = json::parse(r.output);
  std::ifstream jf(out_json);
  CHECK(json::parse(jf) == j);
  REQUIRE(j["configs"].size() == 6);
  size_t no_fit = 0;
  for (const json& c : j["configs"]) {
    INFO(c.dump());
    if (c["fits"] == true) {
      CHECK(c["tokens_per_s"].get<double>() > 0);
      for (const char* key : kTimeFields) CHECK(c["metrics"][key].is_number());
      continue;
    }
    ++no_fit;
    CHECK(c["tokens_per_s"].is_null());
    CHECK(c["pareto"] == false);
    for (const char* key : kTimeFields) CHECK(c["metrics"][key].is_null());
    CHECK(c["metrics"]["peak_allocated_bytes"].get<int64_t>() > 0);
    CHECK(c["metrics"]["peak_reserved_bytes"].get<int64_t>() <= int64_t{3} << 29);
    CHECK_FALSE(c["oom_buffer"].get<std::string>().empty());
  }
  CHECK(no_fit == 3);
  // The base policy (fsdp2, no checkpointing) does not fit either.
  REQUIRE(j.contains("baseline"));
  CHECK(j["baseline"]["fits"] == false);
  CHECK(j["baseline"]["tokens_per_s"].is_null());
  for (const char* key : kTimeFields) CHECK(j["baseline"]["metrics"][key].is_null());

  // CSV: empty fields. A row that does not fit keeps its peaks and names the
  // buffer; a rejected row has no metrics at all.
  const std::string csv = (dir.path / "out.csv").string();
  auto t = run_cli(common + " --out " + csv);
  REQUIRE(t.status == 0);
  std::ifstream in(csv);
  std::string line;
  REQUIRE(std::getline(in, line));
  const std::vector<std::string> header = csv_fields(line);
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  for (const char* key : {"rejected", "fits", "tokens_per_step", "tokens_per_s",
                          "peak_allocated_bytes", "peak_reserved_bytes", "oom_buffer", "policy"})
    REQUIRE(col.count(key));
  size_t rows = 0, rows_no_fit = 0, rows_rejected = 0;
  while (std::getline(in, line)) {
    const std::vector<std::string> v = csv_fields(line);
    REQUIRE(v.size() == header.size());
    INFO(line);
    ++rows;
    auto at = [&](const char* key) { return v[col.at(key)]; };
    std::vector<std::string> times = {at("tokens_per_s")};
    for (const char* key : kTimeFields) times.push_back(at(key));
    if (at("rejected") == "1") {
      ++rows_rejected;
      for (const char* key : {"tokens_per_step", "tokens_per_s", "step_time_ms",
                              "peak_allocated_bytes", "peak_reserved_bytes", "oom_buffer"})
        CHECK(at(key).empty());
    } else if (at("fits") == "0") {
      ++rows_no_fit;
      for (const std::string& f : times) CHECK(f.empty());
      CHECK(std::stoll(at("peak_allocated_bytes")) > 0);
      CHECK(std::stoll(at("peak_reserved_bytes")) > 0);
      CHECK(at("tokens_per_step") == "8192");
      CHECK_FALSE(at("oom_buffer").empty());
    } else {
      for (const std::string& f : times) CHECK_FALSE(f.empty());
      CHECK(std::stod(at("tokens_per_s")) > 0);
      CHECK(at("oom_buffer").empty());
    }
  }
  CHECK(rows == 8);
  CHECK(rows_rejected == 2);
  CHECK(rows_no_fit == 3);

  // The report: a "does not fit" row per configuration, with why, and no
  // numbers for them in the ranking.
  CHECK_THAT(t.output, Catch::Contains("3 fit in 1.50 GiB, 3 do not fit"));
  CHECK_THAT(t.output, Catch::Contains("do not fit in 1.50 GiB (out of memory: no step time"));
  size_t does_not_fit_rows = 0;
  std::istringstream report(t.output);
  bool in_ranking = false;
  for (std::string l; std::getline(report, l);) {
    if (l.find("highest throughput that fit") != std::string::npos) in_ranking = true;
    if (l.find("does not fit  ") == std::string::npos) continue;
    ++does_not_fit_rows;
    INFO(l);
    CHECK_FALSE(in_ranking);
    CHECK_THAT(l, Catch::Contains("activation_checkpointing=none") &&
                      Catch::Contains("(out of memory at '"));
  }
  CHECK(does_not_fit_rows == 3);
  CHECK_THAT(t.output, Catch::Contains("why: the base policy does not fit in 1.50 GiB"));
}
