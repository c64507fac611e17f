// Index math of the cuDNN attention (attention_cudnn.cpp, attention_cudnn_add.cu)
// in functions that compile as plain C++ too, so the host tests check them
// (tests/engine/cuda/test_cuda_attention_cudnn_args.cpp) on machines without a
// device.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>

#include "engine/cuda/ops/dev_ptr.h"

#ifdef __CUDACC__
#define SS_CUDNN_HD __host__ __device__
#else
#define SS_CUDNN_HD
#endif

namespace shardscope::engine::cuda::cudnn_layout {

// Element i of a dense [rows, width] array goes to this offset of an array
// whose rows start every `stride` elements (stride >= width): the gradient
// scratch (dense) added into a packed or separate gradient.
SS_CUDNN_HD inline int64_t strided_row_offset(int64_t i, int64_t width, int64_t stride) {
  return (i / width) * stride + i % width;
}

// Strides, in elements, of cuDNN's logical [B, heads, T, D] view of the
// engine's [B, T, row_stride] rows (head h at columns [h*D, (h+1)*D)).
inline std::array<int64_t, 4> bhtd_strides(int64_t seq, int64_t head_dim, int64_t row_stride) {
  return {seq * row_stride, head_dim, row_stride, 1};
}

// Strides of the statistics [B, H, T, 1] over the engine's lse [B, H, T].
inline std::array<int64_t, 4> stats_strides(int64_t n_head, int64_t seq) {
  return {n_head * seq, seq, 1, 1};
}

}  // namespace shardscope::engine::cuda::cudnn_layout

namespace shardscope::engine::cuda::detail {

// dst[strided_row_offset(i, width, dst_stride)] += src[i] for i < rows * width,
// in fp32, rounded to dst's dtype (attention_cudnn_add.cu).
void launch_add_rows(cudaStream_t s, ConstDevPtr src, int64_t rows, int64_t width, DevPtr dst,
                     int64_t dst_stride, const char* name);

}  // namespace shardscope::engine::cuda::detail
