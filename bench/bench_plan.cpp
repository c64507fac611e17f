// Planner speed: model build, units and one rank's step schedule for large
// models and worlds. Prints figures (recorded in docs/benchmarks.md); never
// asserts on time.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "plan/models.h"
#include "plan/schedule.h"
#include "plan/units.h"

using namespace shardscope;

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main() {
  struct Case {
    const char* model;
    int64_t world;
    nlohmann::json policy;
  };
  const std::vector<Case> cases = {
      {"gpt2-small", 8, {{"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}}},
      {"llama3-8b",
       64,
       {{"wrap", {{"type", "class"}, {"classes", {"LlamaDecoderLayer"}}}},
        {"mixed_precision", {{"param_dtype", "bf16"}}},
        {"activation_checkpointing", "full"}}},
      {"llama3-70b",
       1024,
       {{"wrap", {{"type", "class"}, {"classes", {"LlamaDecoderLayer"}}}},
        {"shard_group_size", 64},
        {"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}},
        {"grad_accum_steps", 4}}},
  };
  std::printf("%-12s %6s %10s %10s %12s %8s %9s %11s\n", "model", "world", "graph ms", "units ms",
              "schedule ms", "ops", "actions", "check ms");
  for (const Case& c : cases) {
    auto t0 = std::chrono::steady_clock::now();
    plan::Graph g = plan::load_model(c.model);
    const double graph_ms = ms_since(t0);
    plan::Policy p = plan::policy_from_json(c.policy);
    plan::World w = plan::validate_policy(p, g, c.world);
    t0 = std::chrono::steady_clock::now();
    plan::UnitPlan up = plan::build_units(g, p, w);
    const double units_ms = ms_since(t0);
    const int reps = 5;
    t0 = std::chrono::steady_clock::now();
    size_t ops = 0, actions = 0;
    for (int r = 0; r < reps; ++r) {
      plan::Schedule s = plan::build_schedule(g, p, up, r);
      ops = s.ops.size();
      actions = s.actions.size();
    }
    const double sched_ms = ms_since(t0) / reps;
    plan::Schedule s = plan::build_schedule(g, p, up, 0);
    t0 = std::chrono::steady_clock::now();
    const size_t violations = plan::check_schedule(g, up, s).size();
    const double check_ms = ms_since(t0);
    std::printf("%-12s %6lld %10.2f %10.2f %12.2f %8zu %9zu %11.2f%s\n", c.model,
                static_cast<long long>(c.world), graph_ms, units_ms, sched_ms, ops, actions,
                check_ms, violations ? "  (VIOLATIONS)" : "");
  }
  return 0;
}
