// Fused causal attention forward (FlashAttention-2 structure, fp32 SIMT):
// one block per (query tile, batch b, head h) loops over the key tiles its
// rows see (causal; with a sliding window, tiles wholly before every row's
// window are skipped: attention_math.h forward_key_tiles), held in shared
// memory, keeping each query row's running max and sum in registers (online
// softmax). No T x T matrix exists anywhere: shared memory holds one
// [kBQ, kBK] tile of probabilities, global memory only q, k, v, out and lse.
// Math in fp32 for every element type.
//
// Block of kFwdThreads = 128 threads = 8 row groups (ty) of 16 lanes (tx).
// Thread (ty, tx) owns query rows r = ty + 8 i (i < kRows) of the tile, the
// key columns c = tx + 16 j (j < kBK / 16) of the score micro-tile and the
// output dims d = tx + 16 j (j < kDMax / 16): the 16 lanes of a half-warp
// share their rows, so row max/sum reductions are 4 shuffles.
//
// AttentionKernel::tensor_core runs attention_tc_forward.cu instead (bf16/f16).
//
// Buckets (D <= kDMax; columns [D, kDMax) of the tiles are zero):
//   kDMax  32: kBQ 64, kBK 64, shared memory  41728 bytes
//   kDMax  64: kBQ 64, kBK 64, shared memory  66304 bytes
//   kDMax 128: kBQ 64, kBK 64, shared memory 115456 bytes
//   kDMax 256: kBQ 16, kBK 64, shared memory 151936 bytes (A100: 166912 at most)
#include <cmath>

#include "engine/cuda/check.h"
#include "engine/cuda/ops/attention_common.cuh"
#include "engine/cuda/ops/attention_cudnn.h"
#include "engine/cuda/ops/attention_tc.cuh"
#include "engine/cuda/ops/nvtx_range.h"
#include "engine/cuda/ops/ops.h"

namespace shardscope::engine::cuda {

namespace attention_detail {
namespace {

constexpr int kFwdThreads = 128;
constexpr int kFwdRowGroups = kFwdThreads / kLanesPerRow;  // 8
constexpr int kFwdBK = 64;                                 // keys per tile

template <int kDMax, int kRows>
struct ForwardTiles {
  static constexpr int kBQ = kFwdRowGroups * kRows;  // queries per block
  static constexpr int kQStride = kDMax + 1;         // +1: rows ty, ty+1 on different banks
  static constexpr int kKStride = kDMax + 1;         // +1: rows tx + 16 j on different banks
  static constexpr int kVStride = kDMax;             // read along d: consecutive lanes
  static constexpr int kPStride = kFwdBK + 1;
  static constexpr int kFloats =
      kBQ * kQStride + kFwdBK * kKStride + kFwdBK * kVStride + kBQ * kPStride;
  static constexpr size_t kSmemBytes = sizeof(float) * kFloats;
};

// Max (or sum) over the 16 lanes of a half-warp; every lane gets the result.
// Called by all 32 lanes of the warp (no divergence at the call sites).
__device__ inline float half_warp_max(float v) {
  for (int offset = kLanesPerRow / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ inline float half_warp_sum(float v) {
  for (int offset = kLanesPerRow / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// grid.x = num_q_tiles * B * H: block x handles query tile
// num_q_tiles - 1 - x / (B*H) (the longest causal rows start first) of
// (b, h) = divmod(x % (B*H), H).
template <typename Elt, int kDMax, int kRows>
__global__ void __launch_bounds__(kFwdThreads)
    attention_forward_kernel(const __grid_constant__ AttentionParams p, const Elt* __restrict__ q,
                             const Elt* __restrict__ k, const Elt* __restrict__ v, Elt* out,
                             float* lse, int64_t num_q_tiles) {
  using Tiles = ForwardTiles<kDMax, kRows>;
  constexpr int kBQ = Tiles::kBQ;
  constexpr int kCols = kFwdBK / kLanesPerRow;  // score columns per thread
  constexpr int kDims = kDMax / kLanesPerRow;   // output dims per thread
  extern __shared__ float smem[];
  float* q_s = smem;                            // [kBQ][kQStride] roped q * scale
  float* k_s = q_s + kBQ * Tiles::kQStride;     // [kBK][kKStride] roped k
  float* v_s = k_s + kFwdBK * Tiles::kKStride;  // [kBK][kVStride]
  float* p_s = v_s + kFwdBK * Tiles::kVStride;  // [kBQ][kPStride] probabilities

  const int tid = static_cast<int>(threadIdx.x);
  const int ty = tid / kLanesPerRow, tx = tid % kLanesPerRow;
  const int64_t seq = p.seq, n_head = p.n_head;
  const int head_dim = p.head_dim;
  const BlockCoords block = block_coords(p.batch, n_head);
  const int64_t q_tile = num_q_tiles - 1 - block.tile;
  const int64_t b = block.b, h = block.head;
  const int64_t hk = h / p.group;
  const int64_t q0 = q_tile * kBQ;

  const Elt* q_head = head_rows(q, b, seq, p.q_stride, h, p.head_stride);
  const Elt* k_head = head_rows(k, b, seq, p.kv_stride, hk, p.head_stride);
  const Elt* v_head = head_rows(v, b, seq, p.kv_stride, hk, p.head_stride);

  zero_pad_columns<kDMax>(q_s, Tiles::kQStride, kBQ, head_dim);
  zero_pad_columns<kDMax>(k_s, Tiles::kKStride, kFwdBK, head_dim);
  zero_pad_columns<kDMax>(v_s, Tiles::kVStride, kFwdBK, head_dim);
  load_tile(q_s, Tiles::kQStride, q_head, p.q_stride, q0, kBQ, p, p.rope, p.scale);

  float o_acc[kRows][kDims];  // unnormalised output rows, scaled to the running max
  float row_max[kRows], row_sum[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    row_max[i] = -INFINITY;
    row_sum[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < kDims; ++j) o_acc[i][j] = 0.0f;
  }

  // The key tiles some row of the tile sees. A row may see no key of the
  // first tiles (a sliding window): its running max stays -inf until it does
  // (attention_math::softmax_offset keeps the exponents finite meanwhile).
  const attention_math::TileRange k_tiles =
      attention_math::forward_key_tiles(q0, kBQ, seq, p.window, kFwdBK);
  for (int64_t k_tile = k_tiles.first; k_tile <= k_tiles.last; ++k_tile) {
    const int64_t k0 = k_tile * kFwdBK;
    __syncthreads();  // every thread is done reading k_s, v_s, p_s of the previous tile
    load_tile(k_s, Tiles::kKStride, k_head, p.kv_stride, k0, kFwdBK, p, p.rope, 1.0f);
    load_tile(v_s, Tiles::kVStride, v_head, p.kv_stride, k0, kFwdBK, p, false, 1.0f);
    __syncthreads();  // q_s (first tile), k_s, v_s visible

    // Scores s[i][j] = q_s[row i] . k_s[col j] (q_s carries the scale).
    float s[kRows][kCols];
#pragma unroll
    for (int i = 0; i < kRows; ++i)
#pragma unroll
      for (int j = 0; j < kCols; ++j) s[i][j] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < head_dim; ++d) {
      float qv[kRows], kv[kCols];
#pragma unroll
      for (int i = 0; i < kRows; ++i) qv[i] = q_s[(ty + kFwdRowGroups * i) * Tiles::kQStride + d];
#pragma unroll
      for (int j = 0; j < kCols; ++j) kv[j] = k_s[(tx + kLanesPerRow * j) * Tiles::kKStride + d];
#pragma unroll
      for (int i = 0; i < kRows; ++i)
#pragma unroll
        for (int j = 0; j < kCols; ++j) s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
    }

    // Soft-capping, the mask, online softmax update, probabilities into p_s.
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int r = ty + kFwdRowGroups * i;
      const int64_t query = q0 + r;
      const int64_t row_query = query < seq ? query : seq - 1;  // padding rows: row seq - 1's mask
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const int64_t key = k0 + tx + kLanesPerRow * j;
        s[i][j] = attention_math::key_visible(row_query, key, p.window)
                      ? attention_math::capped_score(s[i][j], p.softcap)
                      : -INFINITY;
        tile_max = fmaxf(tile_max, s[i][j]);
      }
      tile_max = half_warp_max(tile_max);
      const float new_max = fmaxf(row_max[i], tile_max);  // -inf until the row sees a key
      const float offset = attention_math::softmax_offset(new_max);
      const float correction = expf(row_max[i] - offset);  // 0 until the row saw a key
      float tile_sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const float prob = expf(s[i][j] - offset);  // 0 where masked
        tile_sum += prob;
        p_s[r * Tiles::kPStride + tx + kLanesPerRow * j] = prob;
      }
      tile_sum = half_warp_sum(tile_sum);
      row_sum[i] = row_sum[i] * correction + tile_sum;
      row_max[i] = new_max;
#pragma unroll
      for (int j = 0; j < kDims; ++j) o_acc[i][j] *= correction;
    }
    __syncthreads();  // p_s visible

    // o_acc[i][j] += sum_c p[row i][c] * v[c][dim j]; masked / padding keys
    // have probability 0 and zero rows of v.
#pragma unroll 4
    for (int c = 0; c < kFwdBK; ++c) {
      float pv[kRows], vv[kDims];
#pragma unroll
      for (int i = 0; i < kRows; ++i) pv[i] = p_s[(ty + kFwdRowGroups * i) * Tiles::kPStride + c];
#pragma unroll
      for (int j = 0; j < kDims; ++j) vv[j] = v_s[c * Tiles::kVStride + tx + kLanesPerRow * j];
#pragma unroll
      for (int i = 0; i < kRows; ++i)
#pragma unroll
        for (int j = 0; j < kDims; ++j) o_acc[i][j] = fmaf(pv[i], vv[j], o_acc[i][j]);
    }
  }

  // out [B, T, H*D] and lse [B, H, T] for the tile's valid rows.
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int64_t query = q0 + ty + kFwdRowGroups * i;
    if (query >= seq) continue;
    const float inv_sum = 1.0f / row_sum[i];
    Elt* out_row = out + ((b * seq + query) * n_head + h) * head_dim;
#pragma unroll
    for (int j = 0; j < kDims; ++j) {
      const int d = tx + kLanesPerRow * j;
      if (d < head_dim) Elem<Elt>::store(out_row, d, o_acc[i][j] * inv_sum);
    }
    if (tx == 0) lse[(b * n_head + h) * seq + query] = row_max[i] + logf(row_sum[i]);
  }
}

template <typename Elt, int kDMax, int kRows>
void launch_forward(cudaStream_t s, const AttentionParams& p, const DevQkv& qkv, DevPtr out,
                    float* lse) {
  using Tiles = ForwardTiles<kDMax, kRows>;
  const char* fn = "attention_forward";
  const int64_t num_q_tiles = (p.seq + Tiles::kBQ - 1) / Tiles::kBQ;
  const int64_t blocks = num_q_tiles * p.batch * p.n_head;
  require_grid(fn, blocks);
  const auto kernel = attention_forward_kernel<Elt, kDMax, kRows>;
  set_dynamic_smem(reinterpret_cast<const void*>(kernel), Tiles::kSmemBytes, fn);
  kernel<<<static_cast<unsigned>(blocks), kFwdThreads, Tiles::kSmemBytes, s>>>(
      p, static_cast<const Elt*>(qkv.q.ptr), static_cast<const Elt*>(qkv.k.ptr),
      static_cast<const Elt*>(qkv.v.ptr), static_cast<Elt*>(out.ptr), lse, num_q_tiles);
  SS_CUDA_CHECK_LAUNCH("attention_forward_kernel");
}

}  // namespace
}  // namespace attention_detail

void attention_forward(cudaStream_t s, const AttentionShape& shape, const DevQkv& qkv, DevPtr out,
                       float* lse, AttentionKernel kernel) {
  using namespace attention_detail;
  const char* fn = "attention_forward";
  require_not_cudnn(fn, kernel);
  const AttentionParams p =
      make_attention_params(fn, shape, qkv.q_stride, qkv.kv_stride, qkv.head_stride);
  const int64_t rows = shape.batch * shape.seq;
  const plan::DType dt = qkv.q.dt;
  const ElemType et = elem_type(dt, "attention_forward: q");
  require_operand(fn, "q", qkv.q.ptr, qkv.q.dt, dt, rows);
  require_operand(fn, "k", qkv.k.ptr, qkv.k.dt, dt, rows);
  require_operand(fn, "v", qkv.v.ptr, qkv.v.dt, dt, rows);
  require_operand(fn, "out", out.ptr, out.dt, dt, rows);
  require_operand(fn, "lse", lse, dt, dt, rows);
  if (kernel == AttentionKernel::tensor_core) require_tensor_core(fn, dt, shape.head_dim);
  if (rows == 0) return;

  NvtxRange range(fn);
  if (kernel == AttentionKernel::tensor_core) {
    launch_forward_tc(s, p, et, qkv.q.ptr, qkv.k.ptr, qkv.v.ptr, out.ptr, lse);
    return;
  }
  dispatch_elem(et, [&](auto tag) {
    using Elt = decltype(tag);
    if (p.head_dim <= 32) {
      launch_forward<Elt, 32, 8>(s, p, qkv, out, lse);
    } else if (p.head_dim <= 64) {
      launch_forward<Elt, 64, 8>(s, p, qkv, out, lse);
    } else if (p.head_dim <= 128) {
      launch_forward<Elt, 128, 8>(s, p, qkv, out, lse);
    } else {
      launch_forward<Elt, 256, 2>(s, p, qkv, out, lse);  // 151936 bytes: fits an A100 too
    }
  });
}

}  // namespace shardscope::engine::cuda
