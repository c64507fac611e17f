// What every executor of a plan::Schedule (the CPU engine's RankExecutor, the
// CUDA engine's CudaRankExecutor) derives from the schedule the same way, so
// that their traces and initial weights agree by construction (buffer
// dtypes, roles and op purposes are the schedule's own: plan/schedule.h):
//  - trace vocabulary: event name and op type per schedule op (lane kinds,
//    event and memory categories: plan/trace_vocabulary.h, shared with sim/);
//  - this rank's index in its shard and reshard groups;
//  - initial parameter values of a unit (engine/exec/data.h initial_value).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/exec/layout.h"
#include "plan/graph.h"
#include "plan/policy.h"
#include "plan/schedule.h"
#include "plan/trace_vocabulary.h"
#include "plan/units.h"
#include "traces/trace.h"

namespace shardscope::engine::exec {

// Trace name of a schedule op ("h.0.mlp.fc.forward", "all_gather h.0") and
// its op type (the graph op's type, else the op kind's name).
std::string op_event_name(const plan::Graph& graph, const plan::UnitPlan& units,
                          const plan::ScheduleOp& op);
std::string op_event_type(const plan::Graph& graph, const plan::ScheduleOp& op);
// "op N (<kind> <event name>, stream <stream>)" for messages.
std::string op_label(const plan::Graph& graph, const plan::UnitPlan& units,
                     const plan::Schedule& schedule, int op);

// This rank's position in the process groups the FSDP ops use (found by
// plan::GroupRole).
struct GroupIndices {
  int64_t shard_index = 0;    // index in its shard group (0 when unsharded)
  int64_t reshard_index = 0;  // index in its reshard group (fsdp2 reshard_after_forward=k)
  int shard_group = 0;        // schedule group index of its shard group (0 = world if none)
};
GroupIndices group_indices(const plan::Schedule& schedule);

// Unit parameters in the unsharded layout (layout.h), full_numel() elements:
// every parameter's initial values (initial_value with `seed`), zeros in the
// padding.
std::vector<float> initial_unsharded(const plan::Graph& graph, const UnitLayout& layout,
                                     uint64_t seed);
// Shard `shard_index` of those values (shard_numel() elements, padding 0),
// generated directly: only the held ranges of each parameter are computed,
// so each rank initialises its own shard with no broadcast and the values do
// not depend on the world size.
void fill_initial_shard(const plan::Graph& graph, const UnitLayout& layout, int64_t shard_index,
                        uint64_t seed, float* out);
std::vector<float> initial_shard(const plan::Graph& graph, const UnitLayout& layout,
                                 int64_t shard_index, uint64_t seed);

}  // namespace shardscope::engine::exec
