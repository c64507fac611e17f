// Per-op selective checkpointing in the simulator and in sweeps: a grid
// varying activation_checkpointing over none, torchtitan's preset, a custom
// save list and full on llama3-8b orders peak and step time as the kept
// tensors and the recompute FLOPs say; a save list that matches no op is a rejected configuration
// naming the entry; the sweep's per-configuration activation plans (shared
// between configurations) give the same result as planning each alone.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/models.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "sim/simulator.h"
#include "sim/sweep.h"

using namespace shardscope;
using nlohmann::json;

TEST_CASE("sweeps vary per-op checkpointing: peak and step time ordered", "[sim][sweep][sac]") {
  const plan::Graph g = plan::load_model("llama3-8b");
  const json modes = {"none",
                      {{"preset", "torchtitan"}},
                      {{"save_ops", {"attention", "swiglu"}}},
                      "full",
                      {{"save_ops", {"layernorm"}}}};
  const sim::SweepGrid grid = sim::grid_from_json({{"activation_checkpointing", modes}});
  sim::SweepOptions o;
  o.worlds = {8};
  o.base_policy = {{"wrap", {{"type", "class"}, {"classes", {"LlamaDecoderLayer"}}}},
                   {"seq_len", 4096},
                   {"mixed_precision", {{"param_dtype", "bf16"}}}};
  o.threads = 1;
  o.memory_limit_bytes = int64_t{1} << 40;  // everything fits: times are comparable
  const sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  const sim::SweepResult r = sim::run_sweep(g, grid, hw, o);
  REQUIRE(r.points.size() == 5);
  for (size_t i = 0; i < 4; ++i) {
    INFO(r.points[i].policy.dump() << " " << r.points[i].reason);
    REQUIRE_FALSE(r.points[i].rejected);
    REQUIRE(r.points[i].fits);
  }
  // Llama has no LayerNorm (RMSNorm): the last configuration is rejected.
  CHECK(r.points[4].rejected);
  CHECK_THAT(r.points[4].reason,
             Catch::Contains("activation_checkpointing.save_ops[0]: 'layernorm' matches no op"));
  // none > torchtitan > full in peak, none < torchtitan < full in time;
  // attention + SwiGLU keeps more than torchtitan (32,768 values per token and
  // block against 27,648) and recomputes more (all seven matmuls), so it sits
  // between none and torchtitan in peak and between torchtitan and full in time.
  auto peak = [&](size_t i) { return r.points[i].metrics.peak_allocated_bytes; };
  auto time = [&](size_t i) { return r.points[i].metrics.step_time_ms; };
  auto compute = [&](size_t i) { return r.points[i].metrics.compute_ms; };
  const size_t none = 0, titan = 1, custom = 2, full = 3;
  CHECK(peak(none) > peak(custom));
  CHECK(peak(custom) > peak(titan));
  CHECK(peak(titan) > peak(full));
  CHECK(time(none) < time(titan));
  CHECK(time(titan) < time(custom));
  CHECK(time(custom) < time(full));
  CHECK(compute(none) < compute(titan));
  CHECK(compute(titan) < compute(custom));
  CHECK(compute(custom) < compute(full));
  // Each equals a simulation planned on its own (no shared activation plan).
  for (size_t i = 0; i < 4; ++i) {
    json doc = o.base_policy;
    doc["activation_checkpointing"] = modes[i];
    const plan::Policy p = plan::policy_from_json(doc);
    const plan::World w = plan::validate_policy(p, g, 8);
    const plan::UnitPlan units = plan::build_units(g, p, w);
    sim::SimOptions so;
    so.record_trace = false;
    so.memory_limit_bytes = o.memory_limit_bytes;
    const sim::SimResult sr = sim::simulate(g, units, plan::build_schedule(g, p, units, 0), hw, so);
    CHECK(sr.peak_allocated_bytes == r.points[i].metrics.peak_allocated_bytes);
    CHECK(sr.metrics.total.step_time_ms == r.points[i].metrics.step_time_ms);
  }
}
