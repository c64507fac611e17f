#include "engine/exec/schedule_info.h"

#include <algorithm>
#include <string>

#include "engine/exec/data.h"

namespace shardscope::engine::exec {

std::string op_event_name(const plan::Graph& g, const plan::UnitPlan& up,
                          const plan::ScheduleOp& op) {
  if (op.graph_op >= 0)
    return g.ops[static_cast<size_t>(op.graph_op)].name + "." + plan::op_kind_name(op.kind);
  return std::string(plan::op_kind_name(op.kind)) +
         (op.unit >= 0 ? " " + up.units[static_cast<size_t>(op.unit)].name : "");
}

std::string op_event_type(const plan::Graph& g, const plan::ScheduleOp& op) {
  return op.graph_op >= 0 ? plan::op_type_name(g.ops[static_cast<size_t>(op.graph_op)].type)
                          : plan::op_kind_name(op.kind);
}

std::string op_label(const plan::Graph& g, const plan::UnitPlan& up, const plan::Schedule& s,
                     int index) {
  const plan::ScheduleOp& op = s.ops[static_cast<size_t>(index)];
  return "op " + std::to_string(index) + " (" + plan::op_kind_name(op.kind) + " " +
         op_event_name(g, up, op) + ", stream " + s.streams[static_cast<size_t>(op.stream)] + ")";
}

GroupIndices group_indices(const plan::Schedule& s) {
  GroupIndices gi;
  for (size_t i = 0; i < s.groups.size(); ++i) {
    const plan::ProcessGroup& grp = s.groups[i];
    const auto it = std::find(grp.ranks.begin(), grp.ranks.end(), s.rank);
    if (it == grp.ranks.end()) continue;
    const auto idx = static_cast<int64_t>(it - grp.ranks.begin());
    if (grp.role == plan::GroupRole::shard) {
      gi.shard_index = idx;
      gi.shard_group = static_cast<int>(i);
    }
    if (grp.role == plan::GroupRole::reshard) gi.reshard_index = idx;
  }
  if (s.world.shard_group_size == 1) gi.shard_index = 0;
  return gi;
}

std::vector<float> initial_unsharded(const plan::Graph& g, const UnitLayout& lay, uint64_t seed) {
  std::vector<float> full(static_cast<size_t>(lay.full_numel()), 0.0f);
  for (const ParamPlace& pp : lay.params())
    param_init(g, pp.param).fill(0, pp.numel, seed, full.data() + pp.unsharded);
  return full;
}

void fill_initial_shard(const plan::Graph& g, const UnitLayout& lay, int64_t shard_index,
                        uint64_t seed, float* out) {
  std::fill(out, out + lay.shard_numel(), 0.0f);  // padding
  for (const ParamPlace& pp : lay.params()) {
    const Range r = lay.held_range(pp, shard_index);
    if (r.size() <= 0) continue;
    param_init(g, pp.param)
        .fill(r.begin, r.size(), seed, out + lay.held_shard_offset(pp, shard_index));
  }
}

std::vector<float> initial_shard(const plan::Graph& g, const UnitLayout& lay, int64_t shard_index,
                                 uint64_t seed) {
  std::vector<float> shard(static_cast<size_t>(lay.shard_numel()));
  fill_initial_shard(g, lay, shard_index, seed, shard.data());
  return shard;
}

}  // namespace shardscope::engine::exec
