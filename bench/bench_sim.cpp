// Simulator speed: one Llama-3-70B step on 1,024 GPUs (128 nodes of 8) and
// smaller cases, split into planning (units, schedule) and simulation, with
// and without materialising a trace. Prints figures (recorded in
// docs/benchmarks.md); never asserts on time.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "plan/models.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "sim/simulator.h"

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
  const nlohmann::json llama_wrap = {{"type", "class"}, {"classes", {"LlamaDecoderLayer"}}};
  const std::vector<Case> cases = {
      {"gpt2-small", 8, {{"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}}},
      {"llama3-8b",
       64,
       {{"wrap", llama_wrap},
        {"mixed_precision", {{"param_dtype", "bf16"}}},
        {"activation_checkpointing", "full"}}},
      {"llama3-70b",
       1024,
       {{"wrap", llama_wrap},
        {"shard_group_size", 64},
        {"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}},
        {"activation_checkpointing", "full"}}},
      {"llama3-70b",
       1024,
       {{"wrap", llama_wrap},
        {"shard_group_size", 64},
        {"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}},
        {"activation_checkpointing", "full"},
        {"grad_accum_steps", 4}}},
      {"llama3-70b",
       1024,
       {{"wrap", llama_wrap},
        {"mixed_precision", {{"param_dtype", "bf16"}}},
        {"activation_checkpointing", "full"},
        {"batch_size", 2}}},
  };
  const sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  std::printf("%-11s %5s %3s %7s %8s %9s %9s %9s %9s %10s %9s %7s %5s\n", "model", "world", "ga",
              "ops", "units ms", "sched ms", "sim ms", "notrace", "events", "Mevents/s", "step ms",
              "classes", "fits");
  for (const Case& c : cases) {
    const plan::Graph g = plan::load_model(c.model);
    const plan::Policy p = plan::policy_from_json(c.policy);
    const plan::World w = plan::validate_policy(p, g, c.world);
    const int reps = 10;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) plan::build_units(g, p, w);
    const double units_ms = ms_since(t0) / reps;
    const plan::UnitPlan up = plan::build_units(g, p, w);
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) plan::build_schedule(g, p, up, 0);
    const double sched_ms = ms_since(t0) / reps;
    const plan::Schedule s = plan::build_schedule(g, p, up, 0);
    sim::SimOptions o;
    t0 = std::chrono::steady_clock::now();
    sim::SimResult r;
    for (int i = 0; i < reps; ++i) r = sim::simulate(g, up, s, hw, o);
    const double sim_ms = ms_since(t0) / reps;
    o.record_trace = false;
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) r = sim::simulate(g, up, s, hw, o);
    const double notrace_ms = ms_since(t0) / reps;
    std::printf("%-11s %5lld %3lld %7zu %8.2f %9.2f %9.2f %9.2f %9llu %10.2f %9.1f %7zu %5s\n",
                c.model, static_cast<long long>(c.world),
                static_cast<long long>(p.grad_accum_steps), s.ops.size(), units_ms, sched_ms,
                sim_ms, notrace_ms, static_cast<unsigned long long>(r.sim_events),
                static_cast<double>(r.sim_events) / notrace_ms / 1e3, r.step_time.ms(),
                r.rank_classes.size(), r.fits ? "yes" : "OOM");
  }
  std::printf("(OOM: the step stops at the failed allocation, so fewer events are simulated)\n");
  return 0;
}
