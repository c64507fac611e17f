// Sweep grids varying the mixture-of-experts keys token_balance and
// moe_routing: every point equals a full simulation of its policy (the
// sizes shared between points of one workload are never those of another
// balance), a bad balance is rejected naming the field, and real top-k
// routing (experts sized for every token) costs more memory than a forced
// balance.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "plan/models.h"
#include "plan/policy.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "sim/hardware.h"
#include "sim/simulator.h"
#include "sim/sweep.h"

using namespace shardscope;
using nlohmann::json;

TEST_CASE("sweep grids vary token_balance and moe_routing, points equal full simulations",
          "[sim][sweep][moe]") {
  const plan::Graph g =
      plan::load_model(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/mixtral-tiny.json");
  const sim::SweepGrid grid = sim::grid_from_json(
      {{"token_balance",
        {"uniform", {{"weights", {0.5, 0.3, 0.2, 0.0}}}, {{"weights", {0.5, 0.5}}}}},
       {"moe_routing", {"forced", "topk"}}});
  sim::SweepOptions o;
  o.worlds = {2};
  o.base_policy = {{"wrap", {{"type", "class"}, {"classes", {"MixtralDecoderLayer"}}}},
                   {"batch_size", 2},
                   {"seq_len", 64}};
  o.threads = 2;
  const sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  const sim::SweepResult r = sim::run_sweep(g, grid, hw, o);
  REQUIRE(r.points.size() == 6);
  CHECK(r.rejected == 2);  // two weights for four experts, under either routing
  int64_t forced_uniform = 0, forced_skewed = 0, topk = 0;
  for (const sim::SweepPoint& p : r.points) {
    INFO(p.policy.dump());
    if (p.rejected) {
      CHECK_THAT(p.reason, Catch::Contains("token_balance.weights: 2 weights"));
      continue;
    }
    plan::Policy policy = plan::policy_from_json(p.policy);
    policy.device = hw.device;  // as the sweep plans (its SDPA kernel: plan/sdpa.h)
    const plan::World w = plan::validate_policy(policy, g, 2);
    const plan::UnitPlan units = plan::build_units(g, policy, w);
    const plan::Schedule s = plan::build_schedule(g, policy, units, 0);
    sim::SimOptions so;
    so.record_trace = false;
    const sim::SimResult full = sim::simulate(g, units, s, hw, so);
    CHECK(p.metrics.peak_allocated_bytes == full.metrics.total.peak_allocated_bytes);
    CHECK(p.metrics.step_time_ms == full.metrics.total.step_time_ms);
    const int64_t peak = p.metrics.peak_allocated_bytes;
    if (policy.moe_routing == plan::MoeRouting::topk)
      topk = std::max(topk, peak);
    else if (policy.token_balance.explicit_weights)
      forced_skewed = peak;
    else
      forced_uniform = peak;
  }
  CHECK(forced_uniform > 0);
  CHECK(forced_skewed > 0);
  CHECK(forced_skewed != forced_uniform);  // other expert sizes, other blocks
  CHECK(topk > forced_uniform);            // every expert sized for all 128 tokens
}
