// `shardscope demo`: the README's main job on an embedded default. GPT-2
// small on 8 H100s under four policies, side by side: the plan (units,
// communication, persistent memory) and the simulator's prediction (step
// time, peak reserved memory, overlap); then a what-if sweep of Llama-3-8B on
// 64 H100s with an 80 GiB limit and its recommended policy.
#include <chrono>
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/plan_inputs.h"
#include "plan/models.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "sim/hardware.h"
#include "sim/simulator.h"
#include "sim/sweep.h"

namespace shardscope::cli {

int cmd_demo(int argc, char** argv) {
  Args args(argc, argv, {}, false);
  if (args.help()) {
    std::printf(
        "usage: shardscope demo\n\nPlans and simulates GPT-2 small on 8 H100s under four FSDP "
        "policies,\nthen sweeps 32 policies of Llama-3-8B on 64 H100s under 80 GiB.\n");
    return 0;
  }
  struct Variant {
    const char* label;
    nlohmann::json policy;
  };
  const nlohmann::json blocks = {{"type", "class"}, {"classes", {"GPT2Block"}}};
  const std::vector<Variant> variants = {
      {"fsdp2, one unit (default)", nlohmann::json::object()},
      {"fsdp2, per block, bf16",
       {{"wrap", blocks}, {"mixed_precision", {{"param_dtype", "bf16"}}}}},
      {"fsdp1, per block, SHARD_GRAD_OP",
       {{"flavor", "fsdp1"}, {"wrap", blocks}, {"reshard_after_forward", false}}},
      {"DDP (shard_group_size 1)", {{"shard_group_size", 1}}},
  };
  const plan::Graph g = plan::load_model("gpt2-small");
  const int64_t world = 8;
  const sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  std::printf("shardscope demo: %s (%s parameters) on %lld x %s, batch 1 x seq 1024\n\n",
              g.model_name.c_str(), with_commas(g.params_total()).c_str(),
              static_cast<long long>(world), hw.name.c_str());
  std::printf("%-34s %5s %11s %11s %11s %11s %9s %11s %7s\n", "policy", "units", "all-gather",
              "red-scatter", "all-reduce", "persistent", "step ms", "peak resv", "overlap");
  for (const Variant& v : variants) {
    plan::Policy p = plan::policy_from_json(v.policy);
    plan::World w = plan::validate_policy(p, g, world);
    plan::UnitPlan units = plan::build_units(g, p, w);
    plan::Schedule s = plan::build_schedule(g, p, units, 0);
    plan::CommBytes c = plan::schedule_comm_bytes(s);
    sim::SimOptions so;
    so.record_trace = false;
    const sim::SimResult r = sim::simulate(g, units, s, hw, so);
    std::printf("%-34s %5zu %11s %11s %11s %11s %9.3f %11s %6.1f%%\n", v.label, units.units.size(),
                human_bytes(c.all_gather).c_str(), human_bytes(c.reduce_scatter).c_str(),
                human_bytes(c.all_reduce).c_str(),
                human_bytes(static_cast<double>(s.persistent_device_bytes())).c_str(),
                r.metrics.total.step_time_ms,
                human_bytes(static_cast<double>(r.peak_reserved_bytes)).c_str(),
                100.0 * r.metrics.total.overlap);
  }
  std::printf(
      "\ncommunication is per rank per step; persistent = sharded fp32 parameters + gradients +\n"
      "AdamW state (16 bytes per shard element); step time, peak reserved memory and\n"
      "compute/communication overlap are predicted by the simulator (uncalibrated presets).\n");

  // A what-if sweep: 2 x 2 x 2 x 2 x 2 = 32 policies of Llama-3-8B.
  const plan::Graph llama = plan::load_model("llama3-8b");
  const sim::SweepGrid grid =
      sim::grid_from_json({{"flavor", {"fsdp1", "fsdp2"}},
                           {"reshard_after_forward", {true, false}},
                           {"mixed_precision.param_dtype", {"bf16", "fp32"}},
                           {"activation_checkpointing", {"none", "full"}},
                           {"batch_size", {1, 2}}});
  sim::SweepOptions o;
  o.worlds = {64};
  o.base_policy = {{"wrap", {{"type", "class"}, {"classes", {"LlamaDecoderLayer"}}}}};
  o.memory_limit_bytes = int64_t{80} << 30;
  const auto t0 = std::chrono::steady_clock::now();
  const sim::SweepResult r = sim::run_sweep(llama, grid, hw, o);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\nsweep: llama3-8b on 64 x %s, 80 GiB limit, %zu policies in %.2f s: %zu fit\n",
              hw.name.c_str(), r.points.size(), seconds, r.ranking.size());
  if (r.best >= 0) {
    const sim::SweepPoint& best = r.points[static_cast<size_t>(r.best)];
    std::printf(
        "  highest throughput that fits: %.0f tokens/s (%.1f ms per step), peak reserved %s\n",
        best.tokens_per_s, best.metrics.step_time_ms,
        human_bytes(static_cast<double>(best.metrics.peak_reserved_bytes)).c_str());
    for (const std::string& d : sim::policy_differences(o.base_policy, best.policy))
      std::printf("    %s\n", d.c_str());
  }
  std::printf(
      "\nNext:\n"
      "  shardscope plan --model gpt2-small --world 8 --set wrap.type=class \\\n"
      "      --set 'wrap.classes=[\"GPT2Block\"]'      # the unit table and schedule summary\n"
      "  shardscope simulate --model llama3-8b --world 64 --mem-limit 80GiB   # why this peak\n"
      "  shardscope sweep --model llama3-8b --world 64 --grid grid.json      # docs/sweep.md\n"
      "Measured runs (shardscope run) and the timeline viewer land with their issues;\n"
      "they answer 'not implemented yet' until then.\n");
  return 0;
}

}  // namespace shardscope::cli
