// FLOPs and bytes of one schedule op at its workload: what the simulator's
// cost model charges and what the engines record on their compute events
// (so that an engine trace calibrates compute like a profiler trace).
#pragma once

#include "plan/schedule.h"
#include "plan/workload_sizes.h"

namespace shardscope::plan {

// Forward, recompute (= forward) or backward FLOPs of the op's graph op;
// 0 for ops without one (collectives, copies, casts, optimizer steps are
// costed by bytes).
double schedule_op_flops(const WorkloadSizes& sizes, const ScheduleOp& op);

// Bytes the op moves: the graph op's (fp32) bytes scaled to the op's dtype,
// else the op's own `bytes` (collective S, copy or cast bytes).
double schedule_op_bytes(const WorkloadSizes& sizes, const ScheduleOp& op);

}  // namespace shardscope::plan
