// Index and RoPE math of the cuDNN attention (attention_cudnn.cpp,
// attention_cudnn_kernels.cu)
// in functions that compile as plain C++ too, so the host tests check them
// (tests/engine/cuda/test_cuda_attention_cudnn_args.cpp) on machines without a
// device.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cmath>
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

// RoPE of pair (x1, x2) = (x[i], x[i + D/2]) by the angle whose cosine and
// sine are c, s: the rotation cpu::attention and the SIMT/tensor-core
// kernels apply on load (Hugging Face's rotate_half).
SS_CUDNN_HD inline void rope_rotate(float x1, float x2, float c, float s, float* y1, float* y2) {
  *y1 = x1 * c - x2 * s;
  *y2 = x2 * c + x1 * s;
}
// Its transpose R^T: takes a gradient w.r.t. the rotated pair back to the
// unrotated input.
SS_CUDNN_HD inline void rope_rotate_back(float g1, float g2, float c, float s, float* y1,
                                         float* y2) {
  *y1 = g1 * c + g2 * s;
  *y2 = g2 * c - g1 * s;
}

// inv_freq[i] = theta^(-2i/D) for i < D/2, in double then rounded to fp32, as
// the other attention kernels' make_attention_params; the angle of pair i at
// position t is float(t) * inv_freq[i] in fp32 (sincosf on the device).
constexpr int kRopeMaxPairs = 128;  // head_dim <= 256
struct RopeTable {
  float inv_freq[kRopeMaxPairs] = {};
};
inline RopeTable rope_table(double theta, int64_t head_dim) {
  RopeTable r;
  for (int64_t i = 0; i < head_dim / 2 && i < kRopeMaxPairs; ++i)
    r.inv_freq[i] = static_cast<float>(
        1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim)));
  return r;
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

// RoPE on the way into cuDNN: dst [rows, heads*D] (dense, dst's dtype) = the
// rows of src (row stride src_stride, heads of D) rotated at position
// row % seq (rows are [B, T] flattened).
void launch_rope_rows(cudaStream_t s, ConstDevPtr src, int64_t src_stride, DevPtr dst, int64_t rows,
                      int64_t seq, int64_t heads, int64_t head_dim,
                      const cudnn_layout::RopeTable& table, const char* name);
// And back: dst[row, h*D + .] (row stride dst_stride) += R^T of the dense
// gradient src [rows, heads*D] w.r.t. the rotated rows.
void launch_add_rope_back_rows(cudaStream_t s, ConstDevPtr src, DevPtr dst, int64_t dst_stride,
                               int64_t rows, int64_t seq, int64_t heads, int64_t head_dim,
                               const cudnn_layout::RopeTable& table, const char* name);

}  // namespace shardscope::engine::cuda::detail
