// Shared parts of the fused attention kernels (attention_forward.cu,
// attention_backward.cu): the kernel parameters, the host-side argument
// checks, the blocks' coordinates and the device tile loaders (with RoPE
// applied on the fly).
//
// Layouts (cpu::attention_forward): q [B, T, *] with row stride q_stride, head
// h at column h*head_stride; k, v [B, T, *] with row stride kv_stride, kv
// head hk at column hk*head_stride (head_stride D, or 3*D for GPT-NeoX's
// per-head [H, 3, D] qkv); dq, dk, dv with their own row strides and the
// same head_stride; out and dout [B, T, H*D]; lse and delta [B, H, T] fp32.
// Masks, tile ranges, soft-capping and the rotary slots are attention_math.h's.
// Shared-memory tiles are fp32, row-major [rows, stride] with stride >= kDMax;
// columns [D, kDMax) of a tile are kept at zero so that a bucketed kernel
// (kDMax >= D) computes exactly what a kernel for D would.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/attention_math.h"
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
  int64_t group = 1;                    // n_head / n_kv_head: query head h reads kv head h / group
  int64_t q_stride = 0, kv_stride = 0;  // rows of q; of k and v
  int64_t dq_stride = 0, dkv_stride = 0;  // rows of dq; of dk and dv (backward)
  int64_t head_stride = 0;                // columns between heads of q, k, v and their grads
  int64_t window = 0;                     // sliding window in keys; 0: none
  int head_dim = 0;
  float scale = 1.0f;
  float softcap = 0.0f;  // > 0: scores = softcap * tanh(scores / softcap)
  bool rope = false;
  int rotary_half = 0;  // R/2 with rope (R = rotary_dim, default head_dim), else 0
  // inv_freq[i] = theta^(-2i/R) for i < R/2, computed in double and rounded to
  // float on the host exactly as cpu::attention's RopeTable does.
  float inv_freq[kMaxHeadDim / 2] = {};
};

// Checks `shape` and the strides with cpu::attention's rules plus the CUDA
// limits (head_dim <= kMaxHeadDim) and returns the kernel parameters (the
// gradient strides equal to the inputs'; head_stride 0: head_dim). Throws
// std::invalid_argument naming `fn` and the argument. Touches no CUDA API.
AttentionParams make_attention_params(const char* fn, const cpu::AttentionShape& shape,
                                      int64_t q_stride, int64_t kv_stride, int64_t head_stride = 0);
// Sets the backward's gradient strides after checking them as the inputs' are.
void set_gradient_strides(const char* fn, AttentionParams& p, int64_t dq_stride,
                          int64_t dkv_stride);

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
// of row stride `row_stride`, heads head_stride columns apart: row t is at
// + t * row_stride.
template <typename T>
__device__ __forceinline__ T* head_rows(T* base, int64_t b, int64_t seq, int64_t row_stride,
                                        int64_t head, int64_t head_stride) {
  return base + b * seq * row_stride + head * head_stride;
}

// ---- device tile loaders ----------------------------------------------------------------

// cos/sin of the RoPE angle of pair i at position t, in fp32 as
// Hugging Face's LlamaRotaryEmbedding (and cpu::attention) evaluate them.
__device__ inline void rope_cos_sin(const AttentionParams& p, int64_t t, int i, float* cos_out,
                                    float* sin_out) {
  sincosf(attention_math::rope_angle(t, p.inv_freq[i]), sin_out, cos_out);
}

// tile[r * stride + d] = factor * x_{row0 + r}[d] for r < rows, d < D, where
// x_t is row t of one head (base + t * row_stride), its first 2 * p.rotary_half
// elements rotated by RoPE at position t when `rope` (the rest pass through);
// rows at or past seq are zeros. Columns >= D are not written.
// The tile's element type is fp32 (the SIMT kernels) or the 16-bit type (the
// tensor-core kernels, attention_tc.cuh: rotated and scaled in fp32, then
// rounded once). Called by every thread of the block (strided over the
// tile); no barrier.
template <typename Elt, typename TileElt>
__device__ inline void load_tile(TileElt* tile, int stride, const Elt* base, int64_t row_stride,
                                 int64_t row0, int rows, const AttentionParams& p, bool rope,
                                 float factor) {
  namespace am = attention_math;
  const int head_dim = p.head_dim;
  const int half = rope ? p.rotary_half : 0;
  const int slots = am::rotary_slots(head_dim, half);
  for (int idx = threadIdx.x; idx < rows * slots; idx += blockDim.x) {
    const int r = idx / slots, e = idx % slots;
    const int64_t t = row0 + r;
    const bool valid = t < p.seq;
    const Elt* src = base + t * row_stride;
    if (am::slot_is_pair(e, half)) {
      // y[i] = x[i] cos - x[i + R/2] sin, y[i + R/2] = x[i + R/2] cos + x[i] sin.
      float y1 = 0.0f, y2 = 0.0f;
      if (valid) {
        float c, s;
        rope_cos_sin(p, t, e, &c, &s);
        am::rotate_pair(Elem<Elt>::load(src, e), Elem<Elt>::load(src, e + half), c, s, &y1, &y2);
      }
      Elem<TileElt>::store(tile, r * stride + e, y1 * factor);
      Elem<TileElt>::store(tile, r * stride + e + half, y2 * factor);
    } else {
      const int d = am::slot_element(e, half);
      Elem<TileElt>::store(tile, r * stride + d, valid ? Elem<Elt>::load(src, d) * factor : 0.0f);
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

// Adds slot e (attention_math.h rotary_slots) of R^T g to dst_row, R the RoPE
// rotation at position t of the first 2 * half elements (half = 0: none) and
// g = factor * src[0, D) the gradient w.r.t. the rotated row (the transpose
// rotation takes it back to the unrotated input; pass-through elements are
// added as they are).
template <typename Elt>
__device__ inline void add_rotated_back_slot(Elt* dst_row, const float* src, int e, int half,
                                             int64_t t, const AttentionParams& p, float factor) {
  namespace am = attention_math;
  if (am::slot_is_pair(e, half)) {
    float c, s, g1, g2;
    rope_cos_sin(p, t, e, &c, &s);
    am::rotate_pair_transpose(src[e] * factor, src[e + half] * factor, c, s, &g1, &g2);
    Elem<Elt>::store(dst_row, e, Elem<Elt>::load(dst_row, e) + g1);
    Elem<Elt>::store(dst_row, e + half, Elem<Elt>::load(dst_row, e + half) + g2);
  } else {
    const int d = am::slot_element(e, half);
    Elem<Elt>::store(dst_row, d, Elem<Elt>::load(dst_row, d) + src[d] * factor);
  }
}

}  // namespace shardscope::engine::cuda::attention_detail
