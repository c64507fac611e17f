// The plan of one rank, built once and handed to whatever needs it: the
// executor (units, schedule), the communicator (groups) and the run that
// reports on it. `shardscope run` used to build it three times per rank (the
// CLI's validation, the communicator's groups, the training driver); now the
// CLI validates once (plan::World) and build_rank_plan does the rest.
#pragma once

#include <vector>

#include "engine/comm/communicator.h"
#include "plan/graph.h"
#include "plan/policy.h"
#include "plan/schedule.h"
#include "plan/units.h"

namespace shardscope::engine::exec {

struct RankPlan {
  const plan::Graph* graph = nullptr;  // not owned: outlives the plan
  plan::Policy policy;
  plan::UnitPlan units;             // units.world: the validated world
  plan::Schedule schedule;          // this rank's (schedule.rank)
  std::vector<comm::Group> groups;  // the communicator's groups: schedule.groups, in order
                                    // (identical on every rank)
  int rank() const { return schedule.rank; }
  int world_size() const { return static_cast<int>(units.world.world_size); }
};

// Units, rank `rank`'s schedule and the communicator groups for a world that
// plan::validate_policy already resolved. Throws plan::Error for policies the
// planner cannot plan.
RankPlan build_rank_plan(const plan::Graph& graph, const plan::Policy& policy,
                         const plan::World& world, int rank);

// The same, validating the policy for `world_size` first.
RankPlan build_rank_plan(const plan::Graph& graph, const plan::Policy& policy, int world_size,
                         int rank);

}  // namespace shardscope::engine::exec
