// The optimizer update of one unit's fp32 shard on the host (torch.optim's
// AdamW / SGD semantics, engine/cpu/optim.h): the CPU engine's optimizer op
// and the CUDA engine's offloaded (host-stream) optimizer op run the same code.
#pragma once

#include <cstdint>

#include "plan/policy.h"

namespace shardscope::engine::exec {

// p, grad: n fp32 elements; state: the optimizer's state tensors back to back
// (adamw: exp_avg then exp_avg_sq, 2n; sgd with momentum: n; else unused and
// may be null). `step` counts from 1. Throws ExecError for adamw without state.
void host_optimizer_step(const plan::OptimizerConfig& o, float* p, const float* grad, float* state,
                         int64_t n, int64_t step);

}  // namespace shardscope::engine::exec
