// `shardscope plan`: FSDP units and the step schedule summary of a model under a policy.
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output_flags.h"
#include "cli/plan_inputs.h"
#include "io/output_file.h"
#include "plan/graph_io.h"
#include "plan/schedule.h"
#include "plan/schedule_io.h"
#include "plan/units.h"

namespace shardscope::cli {

namespace {

const char* kUsage =
    "shardscope plan --model M [--policy P] [--set K=V]... [--world N] [--rank R]\n"
    "                [--graph-out FILE] [--schedule-out FILE] [--json]\n\n"
    "  --model M          preset (gpt2-tiny ... llama3-70b, mlp), HF config.json or graph JSON\n"
    "  --policy P         policy JSON (ARCHITECTURE.md keys); --set KEY=VALUE overrides a key\n"
    "  --world N          data-parallel world size (default 8)\n"
    "  --rank R           whose schedule to summarise (default 0)\n"
    "  --graph-out FILE   write the model graph JSON (readable back with --model FILE)\n"
    "  --schedule-out F   write rank R's step schedule JSON (docs/schedule.md)\n"
    "  --json             machine-readable summary";

}  // namespace

int cmd_plan(int argc, char** argv) {
  Args args(
      argc, argv,
      plan_input_flags({{"world"}, {"rank"}, {"graph-out"}, {"schedule-out"}, {"json", false}}),
      false);
  if (args.help()) {
    std::printf("usage: %s\n", kUsage);
    return 0;
  }
  check_output_flag(args, "graph-out");
  check_output_flag(args, "schedule-out");
  const int64_t world = args.get_int("world", 8, 1, 1 << 20);
  const int64_t rank = args.get_int("rank", 0, 0, world - 1);
  PlanInputs in = load_plan_inputs(args, world);
  const plan::Graph& g = in.graph;
  plan::UnitPlan units = plan::build_units(g, in.policy, in.world);
  for (const std::string& w : units.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  plan::Schedule sched = plan::build_schedule(g, in.policy, units, static_cast<int>(rank));
  plan::CommBytes comm = plan::schedule_comm_bytes(sched);

  if (args.has("graph-out")) plan::save_graph_file(g, args.get("graph-out"));
  if (args.has("schedule-out"))
    io::write_output_file(args.get("schedule-out"),
                          plan::schedule_to_json(g, units, sched).dump(1) + "\n");

  // Persistent bytes per rank by category.
  std::map<std::string, int64_t> persistent;
  for (const plan::Buffer& b : sched.buffers)
    if (b.persistent) persistent[plan::buffer_category_name(b.category)] += b.bytes;
  const int64_t persistent_device = sched.persistent_device_bytes();
  const int64_t persistent_host = sched.persistent_host_bytes();

  if (args.has("json")) {
    nlohmann::json j;
    j["model"] = g.model_name;
    j["params_total"] = g.params_total();
    j["world_size"] = in.world.world_size;
    j["shard_group_size"] = in.world.shard_group_size;
    j["policy"] = plan::policy_to_json(in.policy);
    nlohmann::json ju = nlohmann::json::array();
    for (const plan::Unit& u : units.units)
      ju.push_back({{"name", u.name},
                    {"params", u.numel},
                    {"shard_numel", u.shard_numel},
                    {"padded_numel", u.padded_numel},
                    {"modules", u.modules.size()}});
    j["units"] = ju;
    j["comm_bytes_per_rank"] = {{"all_gather", comm.all_gather},
                                {"reduce_scatter", comm.reduce_scatter},
                                {"all_reduce", comm.all_reduce}};
    j["persistent_bytes_per_rank"] = persistent_device + persistent_host;
    j["persistent_device_bytes_per_rank"] = persistent_device;
    j["persistent_host_bytes_per_rank"] = persistent_host;
    j["persistent_by_category"] = persistent;
    nlohmann::json streams;
    for (size_t s = 0; s < sched.streams.size(); ++s) streams[sched.streams[s]] = 0;
    for (const plan::ScheduleOp& op : sched.ops)
      streams[sched.streams[op.stream]] = streams[sched.streams[op.stream]].get<int>() + 1;
    j["ops_per_stream"] = streams;
    j["warnings"] = units.warnings;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }

  std::printf("model %s: %s parameters, %zu modules, %zu ops\n", g.model_name.c_str(),
              with_commas(g.params_total()).c_str(), g.modules.size(), g.ops.size());
  // An exported graph under wrap none wraps its default classes (plan/units.h).
  std::string wrap = plan::wrap_type_name(in.policy.wrap.type);
  if (g.is_exported() && in.policy.wrap.type == plan::WrapType::none) {
    wrap += " (the exported graph's default_wrap_classes:";
    for (const std::string& c : g.default_wrap_classes) wrap += " " + c;
    wrap += ")";
  }
  std::printf("policy: %s, wrap %s, reshard_after_forward %s, backward_prefetch %s\n",
              plan::flavor_name(in.policy.flavor), wrap.c_str(),
              plan::policy_to_json(in.policy)["reshard_after_forward"].dump().c_str(),
              plan::backward_prefetch_name(in.policy.backward_prefetch));
  std::printf(
      "world %lld: shard groups of %lld x %lld replica%s; batch %lld x seq %lld, "
      "grad_accum %lld\n\n",
      static_cast<long long>(in.world.world_size),
      static_cast<long long>(in.world.shard_group_size), static_cast<long long>(in.world.replicas),
      in.world.replicas == 1 ? "" : "s", static_cast<long long>(sched.workload.batch),
      static_cast<long long>(sched.workload.seq), static_cast<long long>(sched.grad_accum_steps));
  std::printf("%-4s %-28s %8s %16s %16s %14s\n", "unit", "name", "modules", "params",
              "shard elems/rank", "shard fp32/rank");
  for (size_t i = 0; i < units.units.size(); ++i) {
    const plan::Unit& u = units.units[i];
    std::printf("%-4zu %-28s %8zu %16s %16s %14s\n", i, u.name.c_str(), u.modules.size(),
                with_commas(u.numel).c_str(), with_commas(u.shard_numel).c_str(),
                human_bytes(static_cast<double>(u.shard_numel) * 4).c_str());
  }
  std::map<std::string, int> per_stream;
  for (const plan::ScheduleOp& op : sched.ops) per_stream[sched.streams[op.stream]]++;
  std::printf("\nschedule of rank %lld: %zu ops, %zu actions; ops per stream:",
              static_cast<long long>(rank), sched.ops.size(), sched.actions.size());
  for (const std::string& s : sched.streams) std::printf(" %s %d", s.c_str(), per_stream[s]);
  std::printf(
      "\ncommunication per rank per step: all-gather %s, reduce-scatter %s, all-reduce %s\n",
      human_bytes(comm.all_gather).c_str(), human_bytes(comm.reduce_scatter).c_str(),
      human_bytes(comm.all_reduce).c_str());
  std::printf("persistent per rank: parameters %s, gradients %s, optimizer state %s = %s%s\n",
              human_bytes(static_cast<double>(persistent["parameters"])).c_str(),
              human_bytes(static_cast<double>(persistent["gradients"])).c_str(),
              human_bytes(static_cast<double>(persistent["optimizer_state"])).c_str(),
              human_bytes(static_cast<double>(persistent_device + persistent_host)).c_str(),
              persistent_host ? " (on the host: cpu_offload)" : "");
  return 0;
}

}  // namespace shardscope::cli
