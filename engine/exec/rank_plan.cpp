#include "engine/exec/rank_plan.h"

namespace shardscope::engine::exec {

RankPlan build_rank_plan(const plan::Graph& graph, const plan::Policy& policy,
                         const plan::World& world, int rank) {
  RankPlan p;
  p.graph = &graph;
  p.policy = policy;
  p.units = plan::build_units(graph, policy, world);
  p.schedule = plan::build_schedule(graph, policy, p.units, rank);
  for (const plan::ProcessGroup& g : p.schedule.groups)
    p.groups.push_back(comm::Group{g.name, g.ranks});
  return p;
}

RankPlan build_rank_plan(const plan::Graph& graph, const plan::Policy& policy, int world_size,
                         int rank) {
  return build_rank_plan(graph, policy, plan::validate_policy(policy, graph, world_size), rank);
}

}  // namespace shardscope::engine::exec
