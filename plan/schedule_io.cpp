#include "plan/schedule_io.h"

namespace shardscope::plan {

using nlohmann::json;

json schedule_to_json(const Graph& g, const UnitPlan& up, const Schedule& s) {
  json j;
  j["format"] = "shardscope.schedule";
  j["version"] = Schedule::kSchemaVersion;
  j["rank"] = s.rank;
  j["world"] = {{"world_size", s.world.world_size},
                {"shard_group_size", s.world.shard_group_size},
                {"replicas", s.world.replicas}};
  j["workload"] = {{"batch_size", s.workload.batch}, {"seq_len", s.workload.seq}};
  if (const TokenBalance* b = s.workload.balance.get()) {  // mixture of experts
    const char* mode = b->mode == TokenBalance::Mode::weights      ? "weights"
                       : b->mode == TokenBalance::Mode::all_tokens ? "all_tokens"
                                                                   : "uniform";
    j["workload"]["token_balance"] = {{"mode", mode}, {"cumulative", b->cumulative}};
  }
  j["grad_accum_steps"] = s.grad_accum_steps;
  j["expandable_segments"] = s.expandable_segments;
  j["streams"] = s.streams;
  json groups = json::array();
  for (const ProcessGroup& pg : s.groups)
    groups.push_back({{"name", pg.name}, {"ranks", pg.ranks}});
  j["groups"] = groups;
  json units = json::array();
  for (const Unit& u : up.units)
    units.push_back({{"name", u.name},
                     {"params", u.numel},
                     {"shard_numel", u.shard_numel},
                     {"padded_numel", u.padded_numel}});
  j["units"] = units;
  json buffers = json::array();
  for (const Buffer& b : s.buffers) {
    json jb = {{"name", buffer_name(g, b)},
               {"bytes", b.bytes},
               {"category", buffer_category_name(b.category)},
               {"stream", s.streams[b.stream]}};
    if (b.unit >= 0) jb["unit"] = b.unit;
    if (b.param >= 0) jb["param"] = b.param;
    if (b.persistent) jb["persistent"] = true;
    if (b.on_host) jb["on_host"] = true;
    buffers.push_back(jb);
  }
  j["buffers"] = buffers;
  json ops = json::array();
  for (const ScheduleOp& op : s.ops) {
    json jo = {{"kind", op_kind_name(op.kind)},
               {"phase", phase_name(op.phase)},
               {"stream", s.streams[op.stream]},
               {"micro_step", op.micro_step}};
    if (op.unit >= 0) jo["unit"] = op.unit;
    if (op.graph_op >= 0) jo["graph_op"] = g.ops[op.graph_op].name;
    if (!op.waits.empty()) jo["waits"] = op.waits.to_vector();
    if (!op.buffers.empty()) jo["buffers"] = op.buffers.to_vector();
    if (op.group >= 0) {
      jo["group"] = s.groups[op.group].name;
      jo["seq"] = op.seq;
    }
    if (op.bytes) jo["bytes"] = op.bytes;
    if (is_collective(op.kind) || op.bytes) jo["dtype"] = dtype_name(op.dtype);
    ops.push_back(jo);
  }
  j["ops"] = ops;
  json actions = json::array();
  for (const Action& a : s.actions) {
    json ja = {{"action", action_kind_name(a.kind)}};
    if (a.op >= 0) ja["op"] = a.op;
    if (a.buffer >= 0) ja["buffer"] = a.buffer;
    if (!a.pending_ops.empty()) ja["pending_ops"] = a.pending_ops.to_vector();
    actions.push_back(ja);
  }
  j["actions"] = actions;
  return j;
}

}  // namespace shardscope::plan
