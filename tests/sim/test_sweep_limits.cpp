// Sweeps at scale: grids counted before they are swept and refused over the
// limit, streamed outputs with a bounded summary, the CLI's limits and progress.
// the Pareto front, thread-count independence, the CLI and its outputs.
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

// `keys` axes of `n` values each (never evaluated: counting only).
json wide_grid(size_t keys, int64_t n) {
  const char* const names[] = {"seed",
                               "batch_size",
                               "seq_len",
                               "forward_prefetch",
                               "grad_clip_norm",
                               "grad_accum_steps",
                               "optimizer.lr",
                               "optimizer.eps",
                               "optimizer.beta1",
                               "optimizer.beta2",
                               "optimizer.momentum",
                               "optimizer.weight_decay"};
  json values = json::array();
  for (int64_t v = 0; v < n; ++v) values.push_back(v);
  json g = json::object();
  for (size_t k = 0; k < keys; ++k) g[names[k]] = values;
  return g;
}

// seed (n values) x shard_group_size 1..20 on world 2: only 1 and 2 divide
// it, so 18 of every 20 are rejected (fast) and 2 simulated.
json mostly_rejected_grid(int64_t n) {
  json seeds = json::array(), groups = json::array();
  for (int64_t v = 0; v < n; ++v) seeds.push_back(v);
  for (int64_t v = 1; v <= 20; ++v) groups.push_back(v);
  return {{"seed", seeds}, {"shard_group_size", groups}};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("a grid is counted before it is swept and refused over the limit",
          "[sim][sweep][limits]") {
  // 10^12: refused at once with the count and the limit (it was std::bad_alloc).
  const sim::SweepGrid huge = sim::grid_from_json(wide_grid(12, 10));
  CHECK(huge.size() == 1000000000000u);
  CHECK_THROWS_WITH(sim::count_configurations(huge, 1),
                    Catch::StartsWith("the sweep has 1000000000000 (1.0e+12) configurations (10 x "
                                      "10 x 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10 x 1 "
                                      "world), over the limit of 10000000"));
  const plan::Graph g = plan::load_model("gpt2-tiny");
  sim::SweepOptions o;
  o.worlds = {2};
  CHECK_THROWS_WITH(sim::run_sweep(g, huge, sim::hardware_preset("h100-sxm"), o),
                    Catch::Contains("1000000000000 (1.0e+12) configurations"));
  // Beyond 2^64: the product overflows and is reported as such.
  const sim::SweepGrid beyond = sim::grid_from_json(wide_grid(4, 100000));
  CHECK(beyond.size() == SIZE_MAX);
  CHECK_THROWS_WITH(
      sim::count_configurations(beyond, 3),
      Catch::Contains("more than 2^64 configurations") && Catch::Contains("x 3 worlds"));
  // The limit itself is accepted; one world more is not.
  const sim::SweepGrid at_limit = sim::grid_from_json(wide_grid(7, 10));
  CHECK(sim::count_configurations(at_limit, 1) == sim::kMaxSweepConfigurations);
  CHECK_THROWS_WITH(sim::count_configurations(at_limit, 2),
                    Catch::Contains("20000000 (2.0e+07) configurations"));
}

TEST_CASE("a sweep streams its configurations in order and keeps a bounded summary",
          "[sim][sweep][limits]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  const sim::SweepGrid grid = sim::grid_from_json(mostly_rejected_grid(1000));
  sim::SweepOptions o;
  o.worlds = {2};
  o.base_policy = base_policy();
  o.threads = 3;
  o.keep = 4;
  size_t seen = 0, rejected = 0, out_of_order = 0;
  const sim::SweepSummary s = sim::sweep_stream(g, grid, sim::hardware_preset("h100-sxm"), o,
                                                [&](const sim::SweepPoint& p) {
                                                  if (p.config != seen) ++out_of_order;
                                                  ++seen;
                                                  rejected += p.rejected;
                                                });
  CHECK(seen == 20000);
  CHECK(out_of_order == 0);
  CHECK(s.total == 20000);
  CHECK(s.rejected == 18000);
  CHECK(rejected == 18000);
  CHECK(s.fit + s.do_not_fit == 2000);
  // Only `keep` of the 2,000 simulated are held, and the front (the seed
  // changes nothing: each shard group size gives one result, and of equal
  // results only the first is on the front).
  CHECK(s.top.size() == 4);
  CHECK(s.pareto.size() <= 2);
  CHECK(s.first_do_not_fit.size() <= 4);
  REQUIRE(s.reasons.size() == 18);  // one per shard group size that does not divide 2
  CHECK(s.reasons[0].second == 1000);
  CHECK(s.other_reasons == 0);
  // The kept top is the head of the full ranking, and the best's index
  // among the simulated configurations is its place in the JSON "configs".
  o.worlds = {2};
  const sim::SweepGrid small = sim::grid_from_json(small_grid());
  const sim::SweepResult full = sim::run_sweep(g, small, sim::hardware_preset("h100-sxm"), o);
  const sim::SweepSummary part =
      sim::sweep_stream(g, small, sim::hardware_preset("h100-sxm"), o, nullptr);
  REQUIRE(part.top.size() == 4);
  for (size_t k = 0; k < 4; ++k) {
    CHECK(part.top[k].config == full.ranking[k]);
    CHECK(part.top[k].pareto == full.points[full.ranking[k]].pareto);
  }
  size_t simulated_before_best = 0;
  for (size_t i = 0; i < static_cast<size_t>(full.best); ++i)
    simulated_before_best += !full.points[i].rejected;
  CHECK(part.best_simulated_index == static_cast<int64_t>(simulated_before_best));
  size_t marked = 0;
  for (const sim::SweepPoint& p : full.points) marked += p.pareto;
  CHECK(part.pareto.size() == marked);
}

TEST_CASE("a configuration over the grad_accum_steps limit is rejected naming the key",
          "[sim][sweep][limits]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  sim::SweepOptions o;
  o.worlds = {2};
  o.base_policy = base_policy();
  o.threads = 1;
  const sim::SweepResult r =
      sim::run_sweep(g, sim::grid_from_json({{"grad_accum_steps", {1, 2000000000}}}),
                     sim::hardware_preset("h100-sxm"), o);
  REQUIRE(r.points.size() == 2);
  CHECK(r.points[0].fits);
  CHECK(r.points[1].rejected);
  CHECK_THAT(r.points[1].reason, Catch::StartsWith("policy: grad_accum_steps: 2000000000") &&
                                     Catch::Contains("over the limit"));
}

TEST_CASE("sweep CLI: limits, streamed outputs and progress on stderr",
          "[sim][sweep][cli][limits]") {
  test::TempDir dir("sweep_limits");
  // The 10^12 grid: exit 2 at once, with the count and the limit.
  const std::string huge = dir.write("huge.json", wide_grid(12, 10));
  auto r = run_cli("sweep --model gpt2-tiny --grid " + huge);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("--grid: the sweep has 1000000000000 (1.0e+12) "
                                       "configurations") &&
                           Catch::Contains("over the limit of 10000000"));
  // grad_accum_steps=2e9: refused naming the key (it was std::bad_alloc).
  r = run_cli("simulate --model gpt2-tiny --world 2 --set grad_accum_steps=2000000000");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("grad_accum_steps: 2000000000 micro-steps") &&
                           Catch::Contains("over the limit"));

  // 10,000 configurations (1,000 simulated): plain progress lines on stderr
  // when it is not a terminal, one per tenth; stdout holds the JSON alone.
  const std::string grid = dir.write("grid.json", mostly_rejected_grid(500));
  const std::string base = dir.write("base.json", base_policy());
  const std::string csv = (dir.path / "all.csv").string();
  const std::string out = (dir.path / "stdout.txt").string();
  const std::string err = (dir.path / "stderr.txt").string();
  const std::string common = std::string(SHARDSCOPE_CLI) + " sweep --model gpt2-tiny --policy " +
                             base + " --grid " + grid + " --world 2 --threads 2 --out " + csv +
                             " --json";
  REQUIRE(std::system((common + " >" + out + " 2>" + err).c_str()) == 0);
  const std::string progress = read_file(err);
  std::vector<std::string> lines;
  std::stringstream ls(progress);
  for (std::string line; std::getline(ls, line);) lines.push_back(line);
  REQUIRE(lines.size() == 10);
  CHECK_THAT(lines[0], Catch::StartsWith("sweep: 10% (1,000/10,000 configurations)"));
  CHECK_THAT(lines[4], Catch::StartsWith("sweep: 50% (5,000/10,000 configurations)"));
  CHECK_THAT(lines[9], Catch::StartsWith("sweep: 100% (10,000/10,000 configurations) in "));
  CHECK(progress.find('\r') == std::string::npos);
  const std::string stdout_text = read_file(out);
  const json j = json::parse(stdout_text);
  CHECK(j["configs"].size() == 1000);
  CHECK(j["rejected"] == 9000);
  // Streamed, yet byte for byte the whole document's dump.
  CHECK(stdout_text == j.dump(2) + "\n");
  std::ifstream in(csv);
  size_t rows = 0;
  for (std::string line; std::getline(in, line);) ++rows;
  CHECK(rows == 10001);  // the header and every configuration
  // --quiet: nothing on stderr, the same stdout.
  REQUIRE(std::system((common + " --quiet >" + out + " 2>" + err).c_str()) == 0);
  CHECK(read_file(err).empty());
  CHECK(read_file(out) == stdout_text);
}
