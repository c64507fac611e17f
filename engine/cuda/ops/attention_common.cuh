// Shared parts of the fused attention kernels (attention_forward.cu,
// attention_backward.cu): the kernel parameters, the host-side argument
// checks, the blocks' coordinates and the device tile loaders (with RoPE
// applied on the fly).
//
// Layouts (cpu::attention_forward): q [B, T, *] with row stride q_stride, head
// h at column h*D; k, v [B, T, *] with row stride kv_stride, kv head hk at
// column hk*D; out and dout [B, T, H*D]; lse and delta [B, H, T] fp32.
// Shared-memory tiles are fp32, row-major [rows, stride] with stride >= kDMax;
// columns [D, kDMax) of a tile are kept at zero so that a bucketed kernel
// (kDMax >= D) computes exactly what a kernel for D would.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/dev_ptr.h"
#include "engine/cuda/ops/element.cuh"

namespace shardscope::engine::cuda::attention_detail {

// Largest head_dim the kernels support (the largest D bucket).
constexpr int kMaxHeadDim = 256;
// Threads of a row group: the 16 lanes of a half-warp share the rows of a
// micro-tile and split its columns (c = lane + 16 j).
constexpr int kLanesPerRow = 16;

// Kernel parameters, passed by value as a __grid_constant__ (the rope table is
// indexed at run time, so it must stay in parameter space, not be copied).
struct AttentionParams {
  int64_t batch = 0, seq = 0, n_head = 0, n_kv_head = 0;
  int64_t group = 1;  // n_head / n_kv_head: query head h reads kv head h / group
  int64_t q_stride = 0, kv_stride = 0;
  int head_dim = 0;
  float scale = 1.0f;
  bool rope = false;
  // inv_freq[i] = theta^(-2i/D) for i < D/2, computed in double and rounded to
  // float on the host exactly as cpu::attention's RopeTable does.
  float inv_freq[kMaxHeadDim / 2] = {};
};

// Checks `shape` and the strides with cpu::attention's rules plus the CUDA
// limits (head_dim <= kMaxHeadDim) and returns the kernel parameters. Throws
// std::invalid_argument naming `fn` and the argument. Touches no CUDA API.
AttentionParams make_attention_params(const char* fn, const cpu::AttentionShape& shape,
                                      int64_t q_stride, int64_t kv_stride);

// Throws std::invalid_argument naming `fn` and `name` when `ptr` is null while
// `count` > 0 elements are accessed, or when `dt` differs from `expected`
// (the dtype of q: every attention tensor but lse/delta shares it).
void require_operand(const char* fn, const char* name, const void* ptr, plan::DType dt,
                     plan::DType expected, int64_t count);

// Throws std::invalid_argument naming `fn` when a 1-D grid of `blocks` blocks
// exceeds the grid.x limit (2^31 - 1).
void require_grid(const char* fn, int64_t blocks);

// Opts the kernel into `bytes` of dynamic shared memory when that exceeds the
// default 48 KiB; throws CudaError when the device offers less.
void set_dynamic_smem(const void* kernel, size_t bytes, const char* fn);

// ---- block coordinates and head rows ----------------------------------------------------

// What block blockIdx.x of a 1-D grid of num_tiles * B * heads blocks works
// on: tile x / (B*heads) and (b, head) = divmod(x % (B*heads), heads). The
// forward kernels pass the query heads (and count their query tiles from the
// last), the backward kernels the kv heads (head is then kv head hk).
struct BlockCoords {
  int64_t tile, b, head;
};
__device__ __forceinline__ BlockCoords block_coords(int64_t batch, int64_t heads) {
  const int64_t batch_heads = batch * heads;
  const int64_t block = blockIdx.x;
  return {block / batch_heads, (block % batch_heads) / heads, block % heads};
}

// Row 0 of head `head` of batch b in a [B, T, *] tensor (q, k, v, dout, dk)
// of row stride `row_stride`, heads head_dim columns apart: row t is at
// + t * row_stride.
template <typename T>
__device__ __forceinline__ T* head_rows(T* base, int64_t b, int64_t seq, int64_t row_stride,
                                        int64_t head, int head_dim) {
  return base + b * seq * row_stride + head * head_dim;
}

// ---- device tile loaders ----------------------------------------------------------------

// cos/sin of the RoPE angle of pair i at position t, in fp32 as
// Hugging Face's LlamaRotaryEmbedding (and cpu::attention) evaluate them.
__device__ inline void rope_cos_sin(const AttentionParams& p, int64_t t, int i, float* cos_out,
                                    float* sin_out) {
  const float angle = static_cast<float>(t) * p.inv_freq[i];
  sincosf(angle, sin_out, cos_out);
}

// tile[r * stride + d] = factor * x_{row0 + r}[d] for r < rows, d < D, where
// x_t is row t of one head (base + t * row_stride), rotated by RoPE at position
// t when `rope`; rows at or past seq are zeros. Columns >= D are not written.
// The tile's element type is fp32 (the SIMT kernels) or the 16-bit type (the
// tensor-core kernels, attention_tc.cuh: rotated and scaled in fp32, then
// rounded once). Called by every thread of the block (strided over the
// tile); no barrier.
template <typename Elt, typename TileElt>
__device__ inline void load_tile(TileElt* tile, int stride, const Elt* base, int64_t row_stride,
                                 int64_t row0, int rows, const AttentionParams& p, bool rope,
                                 float factor) {
  const int head_dim = p.head_dim;
  if (rope) {
    // y[i] = x[i] cos - x[i + D/2] sin, y[i + D/2] = x[i + D/2] cos + x[i] sin.
    const int half = head_dim / 2;
    for (int idx = threadIdx.x; idx < rows * half; idx += blockDim.x) {
      const int r = idx / half, i = idx % half;
      const int64_t t = row0 + r;
      float y1 = 0.0f, y2 = 0.0f;
      if (t < p.seq) {
        const Elt* src = base + t * row_stride;
        const float x1 = Elem<Elt>::load(src, i), x2 = Elem<Elt>::load(src, i + half);
        float c, s;
        rope_cos_sin(p, t, i, &c, &s);
        y1 = x1 * c - x2 * s;
        y2 = x2 * c + x1 * s;
      }
      Elem<TileElt>::store(tile, r * stride + i, y1 * factor);
      Elem<TileElt>::store(tile, r * stride + i + half, y2 * factor);
    }
  } else {
    for (int idx = threadIdx.x; idx < rows * head_dim; idx += blockDim.x) {
      const int r = idx / head_dim, d = idx % head_dim;
      const int64_t t = row0 + r;
      Elem<TileElt>::store(tile, r * stride + d,
                           t < p.seq ? Elem<Elt>::load(base + t * row_stride, d) * factor : 0.0f);
    }
  }
}

// Zeroes columns [D, kDMax) of a [rows, stride] tile (the bucket padding),
// fp32 or 16-bit. Called by every thread of the block; no barrier.
template <int kDMax, typename TileElt>
__device__ inline void zero_pad_columns(TileElt* tile, int stride, int rows, int head_dim) {
  const int pad = kDMax - head_dim;
  for (int idx = threadIdx.x; idx < rows * pad; idx += blockDim.x)
    Elem<TileElt>::store(tile, (idx / pad) * stride + head_dim + idx % pad, 0.0f);
}

// Adds pair (i, i + D/2) of R^T g to dst_row, R the RoPE rotation at position
// t and g = factor * src[0, D) the gradient w.r.t. the rotated row (the
// transpose rotation takes it back to the unrotated input).
template <typename Elt>
__device__ inline void add_rotated_back_pair(Elt* dst_row, const float* src, int i, int half,
                                             int64_t t, const AttentionParams& p, float factor) {
  const float g1 = src[i] * factor, g2 = src[i + half] * factor;
  float c, s;
  rope_cos_sin(p, t, i, &c, &s);
  Elem<Elt>::store(dst_row, i, Elem<Elt>::load(dst_row, i) + (g1 * c + g2 * s));
  Elem<Elt>::store(dst_row, i + half, Elem<Elt>::load(dst_row, i + half) + (g2 * c - g1 * s));
}

}  // namespace shardscope::engine::cuda::attention_detail
