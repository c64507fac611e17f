// What the CUDA engine (engine/cuda/) executes, checked on the host before a
// CUDA run starts: a graph with an op type or an op attribute the CUDA
// kernels do not implement is refused with an error naming the op, instead of
// running different math. CUDA-free, so every build (and its tests) checks it.
#pragma once

#include "plan/graph.h"
#include "plan/policy.h"

namespace shardscope::engine::run {

// Throws std::invalid_argument naming the first op (and its type or
// attribute) the CUDA engine cannot run, and saying to use --backend cpu.
// Every op type and attribute a model builder can emit must be listed in
// cuda_support.cpp as supported or refused.
void check_cuda_supports(const plan::Graph& graph);

// The same for policy features: per-unit mixed precision overrides (an op
// reading a tensor in another unit's dtype: the CUDA kernels take one dtype
// per op) are refused naming overrides[i].mixed_precision.
void check_cuda_supports(const plan::Policy& policy);

}  // namespace shardscope::engine::run
