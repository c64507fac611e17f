#include "engine/exec/rank_plan.h"

#include <string>

#include "plan/error.h"
#include "plan/sdpa.h"

namespace shardscope::engine::exec {

RankPlan build_rank_plan(const plan::Graph& graph, const plan::Policy& policy,
                         const plan::World& world, int rank) {
  RankPlan p;
  p.graph = &graph;
  p.policy = policy;
  p.units = plan::build_units(graph, policy, world);
  // The engines' attention kernels are fused: they save the output and the
  // log-sum-exp. A plan whose attention runs PyTorch's math SDPA fallback
  // (plan/sdpa.h: attention.sdpa_backend "math", or PyTorch's own choice on
  // policy.device) keeps kernel_saved buffers no engine kernel fills: refused.
  const std::vector<plan::SdpaChoice> kernels = plan::sdpa_kernels(graph, policy, p.units);
  for (size_t o = 0; o < kernels.size(); ++o)
    if (kernels[o].kernel == plan::SdpaKernel::math)
      throw plan::Error("attention op " + graph.ops[o].name +
                        " runs PyTorch's math SDPA fallback on " +
                        plan::device_family_name(policy.device) +
                        (kernels[o].refused.empty() ? std::string(" (attention.sdpa_backend)")
                                                    : " (" + kernels[o].refused + ")") +
                        ": the engines run fused attention only (output and log-sum-exp "
                        "saved); `simulate` predicts the math kernel's memory");
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
