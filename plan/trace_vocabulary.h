// How a step schedule's streams, ops and buffers appear in a trace: the one
// mapping every producer of plan-based traces uses (the simulator, the CPU
// engine, the CUDA engine), so that their lanes, event categories and memory
// categories, and so every metric computed from them, agree by construction.
//
// A separate library (shardscope_plan_traces: plan + traces) so that plan/
// itself keeps no dependency on traces/.
#pragma once

#include "plan/schedule.h"
#include "traces/trace.h"

namespace shardscope::plan {

// host -> host; compute -> compute; unshard, all_gather, reduce_scatter,
// all_reduce -> comm; pre_unshard, ag_copy_in -> copy.
traces::LaneKind trace_lane_kind(StreamRole role);

// Collectives -> comm.<kind>; h2d / d2h -> memcpy.h2d / memcpy.d2h; every
// other op -> compute: copy_out, reshard_copy and the casts are kernels that
// take SMs (plan::is_compute), as PyTorch runs them and as Kineto and CUPTI
// report them.
traces::Category trace_category(OpKind kind);

// parameters and unsharded params -> parameters; gradients and unsharded
// grads -> gradients; optimizer state, comm buffers, activations as named;
// workspace -> temporaries.
traces::MemoryCategory trace_memory_category(BufferCategory category);

}  // namespace shardscope::plan
