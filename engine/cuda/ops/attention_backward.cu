// Fused causal attention backward (FlashAttention-2 structure, fp32 SIMT),
// three launches on the caller's stream:
//  1. preprocess: delta[b, h, t] = dout . out (the softmax backward's row
//     term, fp32 [B, H, T]) and dq_acc = 0 (fp32 [B, T, H, D]);
//  2. main: one block per (key tile, batch b, kv head hk) keeps the tile's
//     roped k and v in shared memory and dK, dV in registers, and loops over
//     the query heads of the group and the query tiles that see its keys
//     (attention_math.h backward_query_tiles: causal, and with a sliding
//     window none past the window of its last key): recomputes
//     P = exp(cap(S) - lse) from q, k and lse (cap: the soft-capping, the
//     identity without), dV += P^T dO, dS = P (dO V^T - delta) cap'(S),
//     dK += dS^T Q, and adds dS K to dq_acc with atomics. Finally
//     dk += R^T dK (RoPE transpose) and dv += dV; the block owns those rows;
//  3. dq: dq += R^T (scale * dq_acc).
// Workspace: dq_acc then delta, O(B*T*H*D) floats; never T x T.
// AttentionKernel::tensor_core replaces launch 2 with attention_tc_backward.cu
// (bf16/f16, same workspace and dq_acc convention); launches 1 and 3 are shared.
//
// Main kernel: 256 threads = 16 row groups (ty) of 16 lanes (tx), kB queries
// per query tile and kB keys per key tile. Thread (ty, tx) owns score rows
// r = ty + 16 i and columns c = tx + 16 j (i, j < kB / 16), dK/dV rows
// c = ty + 16 i and dims d = tx + 16 j (j < kDMax / 16), dq rows r = ty + 16 i
// and dims d = tx + 16 j.
//   kDMax  32: kB 64, shared memory  67584 bytes
//   kDMax  64: kB 64, shared memory 100352 bytes
//   kDMax 128: kB 64, shared memory 165888 bytes
//   kDMax 256: kB 32, shared memory 140288 bytes
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/ops/attention_common.cuh"
#include "engine/cuda/ops/attention_cudnn.h"
#include "engine/cuda/ops/attention_tc.cuh"
#include "engine/cuda/ops/nvtx_range.h"
#include "engine/cuda/ops/ops.h"

namespace shardscope::engine::cuda {

namespace attention_detail {
namespace {

constexpr int kBwdThreads = 256;
constexpr int kBwdRowGroups = kBwdThreads / kLanesPerRow;  // 16
constexpr int kPointwiseThreads = 256;
constexpr int64_t kMaxPointwiseBlocks = int64_t{1} << 20;  // grid-stride beyond this
constexpr size_t kWorkspaceAlign = 256;

size_t align_up(size_t bytes) {
  return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

// Workspace layout: dq_acc fp32 [B, T, H, D] at 0, delta fp32 [B, H, T] after it.
size_t dq_acc_bytes(const AttentionShape& s) {
  return align_up(sizeof(float) * static_cast<size_t>(s.batch * s.seq * s.n_head * s.head_dim));
}
size_t delta_bytes(const AttentionShape& s) {
  return align_up(sizeof(float) * static_cast<size_t>(s.batch * s.n_head * s.seq));
}

template <int kDMax, int kB>
struct BackwardTiles {
  static_assert(kB % kLanesPerRow == 0, "tile sizes are multiples of 16");
  static constexpr int kStride = kDMax + 1;  // q, dO, k, v tiles: +1 keeps rows on distinct banks
  static constexpr int kPStride = kB + 1;    // P and dS tiles
  static constexpr int kFloats = 4 * kB * kStride + 2 * kB * kPStride + 2 * kB;
  static constexpr size_t kSmemBytes = sizeof(float) * kFloats;
};

int64_t pointwise_blocks(int64_t threads) {
  return std::min((threads + kPointwiseThreads - 1) / kPointwiseThreads, kMaxPointwiseBlocks);
}

// One warp per (b, t, h) row, row = (b*T + t)*H + h (out's row order):
// delta[(b*H + h)*T + t] = sum_d dout[row, d] * out[row, d]; dq_acc[row, :] = 0.
template <typename Elt>
__global__ void attention_backward_preprocess_kernel(const __grid_constant__ AttentionParams p,
                                                     const Elt* __restrict__ out,
                                                     const Elt* __restrict__ dout,
                                                     float* __restrict__ delta,
                                                     float* __restrict__ dq_acc) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t warps_per_grid = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  const int64_t rows = p.batch * p.seq * p.n_head;
  const int head_dim = p.head_dim;
  // The loop bound is uniform across a warp, so whole warps leave together.
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; row < rows;
       row += warps_per_grid) {
    const Elt* out_row = out + row * head_dim;
    const Elt* dout_row = dout + row * head_dim;
    float sum = 0.0f;
    for (int d = lane; d < head_dim; d += 32)
      sum = fmaf(Elem<Elt>::load(dout_row, d), Elem<Elt>::load(out_row, d), sum);
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const int64_t h = row % p.n_head, bt = row / p.n_head;
    const int64_t b = bt / p.seq, t = bt % p.seq;
    if (lane == 0) delta[(b * p.n_head + h) * p.seq + t] = sum;
    for (int d = lane; d < head_dim; d += 32) dq_acc[row * head_dim + d] = 0.0f;
  }
}

// grid.x = num_k_tiles * B * Hkv: block x handles key tile x / (B*Hkv) (tile 0,
// the one with the most causal queries, first) of (b, hk) = divmod(x % (B*Hkv), Hkv).
template <typename Elt, int kDMax, int kB>
__global__ void __launch_bounds__(kBwdThreads)
    attention_backward_kernel(const __grid_constant__ AttentionParams p, const Elt* __restrict__ q,
                              const Elt* __restrict__ k, const Elt* __restrict__ v,
                              const Elt* __restrict__ dout, const float* __restrict__ lse,
                              const float* __restrict__ delta, float* dq_acc, Elt* dk, Elt* dv) {
  using Tiles = BackwardTiles<kDMax, kB>;
  constexpr int kStride = Tiles::kStride, kPStride = Tiles::kPStride;
  constexpr int kR = kB / kLanesPerRow;        // tile rows (or columns) per thread
  constexpr int kDims = kDMax / kLanesPerRow;  // head dims per thread
  extern __shared__ float smem[];
  float* k_s = smem;                    // [kB][kStride] roped k of the block's key tile
  float* v_s = k_s + kB * kStride;      // [kB][kStride] v
  float* q_s = v_s + kB * kStride;      // [kB][kStride] roped q * scale of the query tile
  float* do_s = q_s + kB * kStride;     // [kB][kStride] dout
  float* p_s = do_s + kB * kStride;     // [kB][kPStride] P[query r][key c]
  float* ds_s = p_s + kB * kPStride;    // [kB][kPStride] dS[query r][key c]
  float* lse_s = ds_s + kB * kPStride;  // [kB]
  float* delta_s = lse_s + kB;          // [kB]

  const int tid = static_cast<int>(threadIdx.x);
  const int ty = tid / kLanesPerRow, tx = tid % kLanesPerRow;
  const int64_t seq = p.seq, n_head = p.n_head, n_kv_head = p.n_kv_head;
  const int head_dim = p.head_dim;
  const BlockCoords block = block_coords(p.batch, n_kv_head);
  const int64_t k_tile = block.tile;
  const int64_t b = block.b, hk = block.head;
  const int64_t k0 = k_tile * kB;
  const int64_t dout_stride = n_head * head_dim;

  zero_pad_columns<kDMax>(k_s, kStride, kB, head_dim);
  zero_pad_columns<kDMax>(v_s, kStride, kB, head_dim);
  zero_pad_columns<kDMax>(q_s, kStride, kB, head_dim);
  zero_pad_columns<kDMax>(do_s, kStride, kB, head_dim);
  const Elt* k_head = head_rows(k, b, seq, p.kv_stride, hk, p.head_stride);
  const Elt* v_head = head_rows(v, b, seq, p.kv_stride, hk, p.head_stride);
  load_tile(k_s, kStride, k_head, p.kv_stride, k0, kB, p, p.rope, 1.0f);
  load_tile(v_s, kStride, v_head, p.kv_stride, k0, kB, p, false, 1.0f);

  float dk_acc[kR][kDims], dv_acc[kR][kDims];  // gradients of roped key rows / value rows
#pragma unroll
  for (int i = 0; i < kR; ++i)
#pragma unroll
    for (int j = 0; j < kDims; ++j) dk_acc[i][j] = dv_acc[i][j] = 0.0f;

  // Queries before k0 see none of this tile's keys: query tiles start at k_tile
  // (query and key tiles have the same size kB, so q0 >= k0 below).
  const attention_math::TileRange q_tiles =
      attention_math::backward_query_tiles(k0, kB, seq, p.window, kB);
  for (int64_t g = 0; g < p.group; ++g) {
    const int64_t h = hk * p.group + g;
    const Elt* q_head = head_rows(q, b, seq, p.q_stride, h, p.head_stride);
    const Elt* dout_head = head_rows(dout, b, seq, dout_stride, h, head_dim);
    const float* lse_head = lse + (b * n_head + h) * seq;
    const float* delta_head = delta + (b * n_head + h) * seq;
    for (int64_t q_tile = q_tiles.first; q_tile <= q_tiles.last; ++q_tile) {
      const int64_t q0 = q_tile * kB;
      __syncthreads();  // every thread is done with q_s, do_s, p_s, ds_s, lse_s of the last tile
      load_tile(q_s, kStride, q_head, p.q_stride, q0, kB, p, p.rope, p.scale);
      load_tile(do_s, kStride, dout_head, dout_stride, q0, kB, p, false, 1.0f);
      for (int r = tid; r < kB; r += kBwdThreads) {
        const int64_t t = q0 + r;
        lse_s[r] = t < seq ? lse_head[t] : 0.0f;
        delta_s[r] = t < seq ? delta_head[t] : 0.0f;
      }
      __syncthreads();  // tiles (and, on the first pass, k_s and v_s) visible

      // S = Q K^T and dP = dO V^T on the micro-tile rows ty + 16 i, columns tx + 16 j.
      float s[kR][kR], dp[kR][kR];
#pragma unroll
      for (int i = 0; i < kR; ++i)
#pragma unroll
        for (int j = 0; j < kR; ++j) s[i][j] = dp[i][j] = 0.0f;
#pragma unroll 4
      for (int d = 0; d < head_dim; ++d) {
        float qv[kR], dov[kR], kv[kR], vv[kR];
#pragma unroll
        for (int i = 0; i < kR; ++i) {
          qv[i] = q_s[(ty + kBwdRowGroups * i) * kStride + d];
          dov[i] = do_s[(ty + kBwdRowGroups * i) * kStride + d];
          kv[i] = k_s[(tx + kLanesPerRow * i) * kStride + d];
          vv[i] = v_s[(tx + kLanesPerRow * i) * kStride + d];
        }
#pragma unroll
        for (int i = 0; i < kR; ++i)
#pragma unroll
          for (int j = 0; j < kR; ++j) {
            s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
            dp[i][j] = fmaf(dov[i], vv[j], dp[i][j]);
          }
      }
      // P = exp(cap(S) - lse) where the query (< T) sees the key, else 0;
      // dS = P (dP - delta) cap'(S).
#pragma unroll
      for (int i = 0; i < kR; ++i) {
        const int r = ty + kBwdRowGroups * i;
        const int64_t query = q0 + r;
#pragma unroll
        for (int j = 0; j < kR; ++j) {
          const int c = tx + kLanesPerRow * j;
          const bool visible = query < seq && attention_math::key_visible(query, k0 + c, p.window);
          float prob = 0.0f, ds = 0.0f;
          if (visible) {
            prob = expf(attention_math::capped_score(s[i][j], p.softcap) - lse_s[r]);
            ds = prob * (dp[i][j] - delta_s[r]) *
                 attention_math::capped_score_grad(s[i][j], p.softcap);
          }
          p_s[r * kPStride + c] = prob;
          ds_s[r * kPStride + c] = ds;
        }
      }
      __syncthreads();  // p_s, ds_s visible

      // dV[c] += sum_r P[r][c] dO[r]; dK[c] += sum_r dS[r][c] Q[r] (Q carries the
      // scale), for key rows c = ty + 16 i and dims d = tx + 16 j.
#pragma unroll 2
      for (int r = 0; r < kB; ++r) {
        float pv[kR], dsv[kR], dov[kDims], qv[kDims];
#pragma unroll
        for (int i = 0; i < kR; ++i) {
          pv[i] = p_s[r * kPStride + ty + kBwdRowGroups * i];
          dsv[i] = ds_s[r * kPStride + ty + kBwdRowGroups * i];
        }
#pragma unroll
        for (int j = 0; j < kDims; ++j) {
          dov[j] = do_s[r * kStride + tx + kLanesPerRow * j];
          qv[j] = q_s[r * kStride + tx + kLanesPerRow * j];
        }
#pragma unroll
        for (int i = 0; i < kR; ++i)
#pragma unroll
          for (int j = 0; j < kDims; ++j) {
            dv_acc[i][j] = fmaf(pv[i], dov[j], dv_acc[i][j]);
            dk_acc[i][j] = fmaf(dsv[i], qv[j], dk_acc[i][j]);
          }
      }

      // dq_acc[query r] += sum_c dS[r][c] K[c] (roped space, unscaled), query
      // rows r = ty + 16 i, dims d = tx + 16 j; other key tiles add to the same rows.
      float dq[kR][kDims];
#pragma unroll
      for (int i = 0; i < kR; ++i)
#pragma unroll
        for (int j = 0; j < kDims; ++j) dq[i][j] = 0.0f;
#pragma unroll 2
      for (int c = 0; c < kB; ++c) {
        float dsv[kR], kv[kDims];
#pragma unroll
        for (int i = 0; i < kR; ++i) dsv[i] = ds_s[(ty + kBwdRowGroups * i) * kPStride + c];
#pragma unroll
        for (int j = 0; j < kDims; ++j) kv[j] = k_s[c * kStride + tx + kLanesPerRow * j];
#pragma unroll
        for (int i = 0; i < kR; ++i)
#pragma unroll
          for (int j = 0; j < kDims; ++j) dq[i][j] = fmaf(dsv[i], kv[j], dq[i][j]);
      }
#pragma unroll
      for (int i = 0; i < kR; ++i) {
        const int64_t query = q0 + ty + kBwdRowGroups * i;
        if (query >= seq) continue;
        float* dq_row = dq_acc + ((b * seq + query) * n_head + h) * head_dim;
#pragma unroll
        for (int j = 0; j < kDims; ++j) {
          const int d = tx + kLanesPerRow * j;
          if (d < head_dim) atomicAdd(dq_row + d, dq[i][j]);
        }
      }
    }
  }

  // dv rows k0 + c: this block is their only writer.
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const int64_t key = k0 + ty + kBwdRowGroups * i;
    if (key >= seq) continue;
    Elt* dv_row = dv + (b * seq + key) * p.dkv_stride + hk * p.head_stride;
#pragma unroll
    for (int j = 0; j < kDims; ++j) {
      const int d = tx + kLanesPerRow * j;
      if (d < head_dim) Elem<Elt>::store(dv_row, d, Elem<Elt>::load(dv_row, d) + dv_acc[i][j]);
    }
  }
  // dK goes through k_s so that the RoPE transpose can pair dims i and i + D/2.
  __syncthreads();  // every thread is done reading k_s
#pragma unroll
  for (int i = 0; i < kR; ++i)
#pragma unroll
    for (int j = 0; j < kDims; ++j)
      k_s[(ty + kBwdRowGroups * i) * kStride + tx + kLanesPerRow * j] = dk_acc[i][j];
  __syncthreads();  // dK rows visible
  Elt* dk_head = head_rows(dk, b, seq, p.dkv_stride, hk, p.head_stride);
  const int slots = attention_math::rotary_slots(head_dim, p.rotary_half);
  for (int idx = tid; idx < kB * slots; idx += kBwdThreads) {
    const int c = idx / slots, e = idx % slots;
    const int64_t key = k0 + c;
    if (key < seq)
      add_rotated_back_slot(dk_head + key * p.dkv_stride, k_s + c * kStride, e, p.rotary_half, key,
                            p, 1.0f);
  }
}

// dq[b, t, h] += R^T (scale * dq_acc[(b*T + t)*H + h]) (R: RoPE at position t
// on the first 2 * rotary_half dims; identity without rope). One thread per
// rotary slot: a dim pair or a pass-through dim (attention_math.h).
template <typename Elt>
__global__ void attention_backward_dq_kernel(const __grid_constant__ AttentionParams p,
                                             const float* __restrict__ dq_acc, Elt* dq) {
  const int head_dim = p.head_dim;
  const int per_row = attention_math::rotary_slots(head_dim, p.rotary_half);
  const int64_t total = p.batch * p.seq * p.n_head * per_row;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += step) {
    const int64_t row = idx / per_row;  // (b*T + t)*H + h
    const int e = static_cast<int>(idx % per_row);
    const int64_t h = row % p.n_head, bt = row / p.n_head;
    Elt* dq_row = dq + bt * p.dq_stride + h * p.head_stride;
    add_rotated_back_slot(dq_row, dq_acc + row * head_dim, e, p.rotary_half, bt % p.seq, p,
                          p.scale);
  }
}

// Launch 1: delta and dq_acc = 0.
template <typename Elt>
void launch_backward_preprocess(cudaStream_t s, const AttentionParams& p, ConstDevPtr out,
                                ConstDevPtr dout, float* dq_acc, float* delta) {
  const int64_t rows = p.batch * p.seq * p.n_head;
  attention_backward_preprocess_kernel<Elt>
      <<<static_cast<unsigned>(pointwise_blocks(rows * 32)), kPointwiseThreads, 0, s>>>(
          p, static_cast<const Elt*>(out.ptr), static_cast<const Elt*>(dout.ptr), delta, dq_acc);
  SS_CUDA_CHECK_LAUNCH("attention_backward_preprocess_kernel");
}

// Launch 3: dq += R^T (scale * dq_acc).
template <typename Elt>
void launch_backward_dq(cudaStream_t s, const AttentionParams& p, const float* dq_acc, DevPtr dq) {
  const int64_t rows = p.batch * p.seq * p.n_head;
  const int64_t dq_threads = rows * attention_math::rotary_slots(p.head_dim, p.rotary_half);
  attention_backward_dq_kernel<Elt>
      <<<static_cast<unsigned>(pointwise_blocks(dq_threads)), kPointwiseThreads, 0, s>>>(
          p, dq_acc, static_cast<Elt*>(dq.ptr));
  SS_CUDA_CHECK_LAUNCH("attention_backward_dq_kernel");
}

template <typename Elt, int kDMax, int kB>
void launch_backward(cudaStream_t s, const AttentionParams& p, const DevQkv& qkv, ConstDevPtr out,
                     const float* lse, ConstDevPtr dout, const DevQkvGrad& grad, float* dq_acc,
                     float* delta) {
  using Tiles = BackwardTiles<kDMax, kB>;
  const char* fn = "attention_backward";
  const int64_t num_tiles = (p.seq + kB - 1) / kB;
  const int64_t main_blocks = num_tiles * p.batch * p.n_kv_head;
  require_grid(fn, main_blocks);

  launch_backward_preprocess<Elt>(s, p, out, dout, dq_acc, delta);

  const auto kernel = attention_backward_kernel<Elt, kDMax, kB>;
  set_dynamic_smem(reinterpret_cast<const void*>(kernel), Tiles::kSmemBytes, fn);
  kernel<<<static_cast<unsigned>(main_blocks), kBwdThreads, Tiles::kSmemBytes, s>>>(
      p, static_cast<const Elt*>(qkv.q.ptr), static_cast<const Elt*>(qkv.k.ptr),
      static_cast<const Elt*>(qkv.v.ptr), static_cast<const Elt*>(dout.ptr), lse, delta, dq_acc,
      static_cast<Elt*>(grad.dk.ptr), static_cast<Elt*>(grad.dv.ptr));
  SS_CUDA_CHECK_LAUNCH("attention_backward_kernel");

  launch_backward_dq<Elt>(s, p, dq_acc, grad.dq);
}

// The tensor-core backward: the same launches 1 and 3 around attention_tc_backward.cu.
template <typename Elt>
void launch_backward_tensor_core(cudaStream_t s, const AttentionParams& p, ElemType et,
                                 const DevQkv& qkv, ConstDevPtr out, const float* lse,
                                 ConstDevPtr dout, const DevQkvGrad& grad, float* dq_acc,
                                 float* delta) {
  require_grid("attention_backward", backward_tc_blocks(p));
  launch_backward_preprocess<Elt>(s, p, out, dout, dq_acc, delta);
  launch_backward_tc(s, p, et, qkv.q.ptr, qkv.k.ptr, qkv.v.ptr, dout.ptr, lse, delta, dq_acc,
                     grad.dk.ptr, grad.dv.ptr);
  launch_backward_dq<Elt>(s, p, dq_acc, grad.dq);
}

}  // namespace
}  // namespace attention_detail

size_t attention_backward_workspace_bytes(const AttentionShape& shape) {
  using namespace attention_detail;
  make_attention_params("attention_backward_workspace_bytes", shape, shape.n_head * shape.head_dim,
                        shape.n_kv_head * shape.head_dim);
  return dq_acc_bytes(shape) + delta_bytes(shape);
}

void attention_backward(cudaStream_t s, const AttentionShape& shape, const DevQkv& qkv,
                        ConstDevPtr out, const float* lse, ConstDevPtr dout, const DevQkvGrad& grad,
                        Workspace ws, AttentionKernel kernel) {
  using namespace attention_detail;
  const char* fn = "attention_backward";
  require_not_cudnn(fn, kernel);
  AttentionParams p =
      make_attention_params(fn, shape, qkv.q_stride, qkv.kv_stride, qkv.head_stride);
  if (grad.head_stride != qkv.head_stride)
    throw std::invalid_argument(std::string(fn) + ": grad.head_stride " +
                                std::to_string(grad.head_stride) + " differs from the inputs' " +
                                std::to_string(qkv.head_stride));
  set_gradient_strides(fn, p, grad.q_stride, grad.kv_stride);
  const int64_t rows = shape.batch * shape.seq;
  const plan::DType dt = qkv.q.dt;
  const ElemType et = elem_type(dt, "attention_backward: q");
  require_operand(fn, "q", qkv.q.ptr, qkv.q.dt, dt, rows);
  require_operand(fn, "k", qkv.k.ptr, qkv.k.dt, dt, rows);
  require_operand(fn, "v", qkv.v.ptr, qkv.v.dt, dt, rows);
  require_operand(fn, "out", out.ptr, out.dt, dt, rows);
  require_operand(fn, "lse", lse, dt, dt, rows);
  require_operand(fn, "dout", dout.ptr, dout.dt, dt, rows);
  require_operand(fn, "dq", grad.dq.ptr, grad.dq.dt, dt, rows);
  require_operand(fn, "dk", grad.dk.ptr, grad.dk.dt, dt, rows);
  require_operand(fn, "dv", grad.dv.ptr, grad.dv.dt, dt, rows);
  const bool tensor_core = kernel == AttentionKernel::tensor_core;
  if (tensor_core) require_tensor_core(fn, dt, shape.head_dim);
  if (rows == 0) return;
  const size_t needed = attention_backward_workspace_bytes(shape);
  if (ws.ptr == nullptr || ws.bytes < needed)
    throw std::invalid_argument(std::string(fn) + ": workspace (ws) holds " +
                                std::to_string(ws.ptr == nullptr ? 0 : ws.bytes) +
                                " bytes, needs " + std::to_string(needed) +
                                " (attention_backward_workspace_bytes)");
  if (reinterpret_cast<uintptr_t>(ws.ptr) % alignof(float) != 0)
    throw std::invalid_argument(std::string(fn) + ": workspace (ws) is not 4-byte aligned");
  float* dq_acc = static_cast<float*>(ws.ptr);
  float* delta = reinterpret_cast<float*>(static_cast<char*>(ws.ptr) + dq_acc_bytes(shape));

  NvtxRange range(fn);
  dispatch_elem(et, [&](auto tag) {
    using Elt = decltype(tag);
    if (tensor_core) {
      launch_backward_tensor_core<Elt>(s, p, et, qkv, out, lse, dout, grad, dq_acc, delta);
    } else if (p.head_dim <= 32) {
      launch_backward<Elt, 32, 64>(s, p, qkv, out, lse, dout, grad, dq_acc, delta);
    } else if (p.head_dim <= 64) {
      launch_backward<Elt, 64, 64>(s, p, qkv, out, lse, dout, grad, dq_acc, delta);
    } else if (p.head_dim <= 128) {
      launch_backward<Elt, 128, 64>(s, p, qkv, out, lse, dout, grad, dq_acc, delta);
    } else {
      launch_backward<Elt, 256, 32>(s, p, qkv, out, lse, dout, grad, dq_acc, delta);
    }
  });
}

}  // namespace shardscope::engine::cuda
