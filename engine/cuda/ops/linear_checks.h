// Argument checks of linear_forward / linear_backward (gemm.cu), exposed so
// that tests on machines without a GPU can exercise them: the launchers call
// these first, before touching the Blas or any CUDA API. Both throw
// std::invalid_argument naming the function and the argument.
#pragma once

#include <cstdint>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/dev_ptr.h"

namespace shardscope::engine::cuda::detail {

// x, w, y: one float dtype each, x and w equal (y may also be f32 with
// 16-bit inputs: fp32 output of a bf16/f16 GEMM); bias any float dtype or null.
void check_linear_forward(ConstDevPtr x, ConstDevPtr w, ConstDevPtr bias, ConstDevPtr y, int64_t n,
                          int64_t in, int64_t out);
// x, w, dy of one dtype; dx (nullable), dw (required): that dtype or f32;
// dbias (nullable) any float dtype; ws_bytes: the caller's workspace.
void check_linear_backward(ConstDevPtr x, ConstDevPtr w, ConstDevPtr dy, ConstDevPtr dx,
                           ConstDevPtr dw, ConstDevPtr dbias, int64_t n, int64_t in, int64_t out,
                           const void* ws_ptr, size_t ws_bytes);

}  // namespace shardscope::engine::cuda::detail
