// `shardscope demo`: the README's main job on an embedded default. Until the
// engine and the simulator land it tours the planner: GPT-2 small on 8 ranks
// under four policies, side by side (units, communication, persistent memory).
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/plan_inputs.h"
#include "plan/models.h"
#include "plan/schedule.h"
#include "plan/units.h"

namespace shardscope::cli {

int cmd_demo(int argc, char** argv) {
  Args args(argc, argv, {}, false);
  if (args.help()) {
    std::printf(
        "usage: shardscope demo\n\nPlans GPT-2 small on 8 ranks under four FSDP "
        "policies and compares them.\n");
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
  std::printf("shardscope demo: %s (%s parameters) on %lld ranks, batch 1 x seq 1024\n\n",
              g.model_name.c_str(), with_commas(g.params_total()).c_str(),
              static_cast<long long>(world));
  std::printf("%-34s %6s %14s %14s %14s %16s %8s\n", "policy", "units", "all-gather",
              "reduce-scatter", "all-reduce", "persistent/rank", "ops");
  for (const Variant& v : variants) {
    plan::Policy p = plan::policy_from_json(v.policy);
    plan::World w = plan::validate_policy(p, g, world);
    plan::UnitPlan units = plan::build_units(g, p, w);
    plan::Schedule s = plan::build_schedule(g, p, units, 0);
    plan::CommBytes c = plan::schedule_comm_bytes(s);
    std::printf("%-34s %6zu %14s %14s %14s %16s %8zu\n", v.label, units.units.size(),
                human_bytes(c.all_gather).c_str(), human_bytes(c.reduce_scatter).c_str(),
                human_bytes(c.all_reduce).c_str(),
                human_bytes(static_cast<double>(s.persistent_device_bytes())).c_str(),
                s.ops.size());
  }
  std::printf(
      "\ncommunication is per rank per step; persistent = sharded fp32 parameters + gradients +\n"
      "AdamW state (16 bytes per shard element). Next:\n"
      "  shardscope plan --model gpt2-small --world 8 --set wrap.type=class \\\n"
      "      --set 'wrap.classes=[\"GPT2Block\"]'      # the unit table and schedule summary\n"
      "  shardscope plan --model llama3-8b --world 64 --set shard_group_size=8 --json\n"
      "  shardscope simulate --model gpt2-small --world 8   # predicted step time and memory\n"
      "Measured runs (shardscope run), sweeps and the timeline viewer land with their\n"
      "issues; they answer 'not implemented yet' until then.\n");
  return 0;
}

}  // namespace shardscope::cli
