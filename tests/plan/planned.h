// The fixture plan/ and sim/ tests start from: a model planned under a policy
// JSON on `world` ranks, as `shardscope plan` and `simulate` do it
// (policy_from_json, validate_policy, build_units, build_schedule).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "plan/graph.h"
#include "plan/models.h"
#include "plan/policy.h"
#include "plan/schedule.h"
#include "plan/units.h"

namespace shardscope::test {

struct Planned {
  plan::Graph graph;
  plan::Policy policy;
  plan::UnitPlan units;
  plan::Schedule schedule;  // one rank's (plan_model); empty after plan_units
};

// Graph, policy and units; no schedule.
inline Planned plan_units(plan::Graph graph, const nlohmann::json& policy, int64_t world) {
  Planned p;
  p.graph = std::move(graph);
  p.policy = plan::policy_from_json(policy);
  const plan::World w = plan::validate_policy(p.policy, p.graph, world);
  p.units = plan::build_units(p.graph, p.policy, w);
  return p;
}

// plan_units, then rank `rank`'s schedule.
inline Planned plan_model(plan::Graph graph, const nlohmann::json& policy, int64_t world,
                          int rank = 0) {
  Planned p = plan_units(std::move(graph), policy, world);
  p.schedule = plan::build_schedule(p.graph, p.policy, p.units, rank);
  return p;
}

// The same for a model by name (a preset or a file: plan::load_model).
inline Planned plan_model(const std::string& model, const nlohmann::json& policy, int64_t world,
                          int rank = 0) {
  return plan_model(plan::load_model(model), policy, world, rank);
}

}  // namespace shardscope::test
