// Main launch of the fused causal attention backward on the tensor cores
// (WMMA, bf16/f16 tiles, fp32 accumulators). attention_backward.cu runs the
// SIMT backward's preprocess (delta = dout . out, dq_acc = 0) before it and
// its dq launch (dq += R^T (scale * dq_acc)) after it; the workspace is the same.
//
// Block: one (key tile of 64, batch b, kv head hk), 4 warps, warp w owns key
// rows 16w .. 16w + 15. It keeps the tile's roped k and v in shared memory
// and the warp's dK, dV rows [16][kD] in accumulator fragments (registers),
// and loops over the query heads of the group and the query tiles of 64 that
// see its keys (attention_math.h backward_query_tiles: causal, and none past
// a sliding window). Per query tile each warp
//  1. computes S^T = K_w Q^T and dP^T = V_w dO^T [16 keys][64 queries] with
//     wmma (Q^T, dO^T: col_major matrix_b views of the row-major tiles) into
//     its fp32 scratch;
//  2. lanes 2r, 2r + 1 own key row r (query columns c = 2j + lane % 2):
//     P^T = exp(cap(S^T) - lse[q]) where query < T sees the key, else 0,
//     and dS^T = P^T (dP^T - delta[q]) cap'(S^T) (cap: the soft-capping,
//     the identity without), both rounded to 16 bits into the block's
//     P^T and dS^T tiles;
//  3. dV_w += P^T_w dO and dK_w += dS^T_w Q (Q carries the scale, so dK is
//     the gradient of the roped key rows, as in the SIMT kernel);
//  4. after a block barrier, dQ [64 queries][kD] = dS K (dS: a col_major
//     matrix_a view of the dS^T tile), warp w computing query rows
//     16w .. 16w + 15 into its scratch, added to dq_acc with atomics (roped
//     space, unscaled: the dq launch applies the scale and R^T).
// Finally dv += dV and dk += R^T dK for the block's valid key rows (the
// block is their only writer).
//
// Shared memory per block (kD: the head_dim bucket 32, 64 or 128):
//   k, v, q, dout [64][kD + 8] 16-bit, P^T and dS^T [64][72] 16-bit,
//   per-warp fp32 scratch max(2 [16][68], [16][kD + 4]), lse and delta [64]:
//   74240, 90624 and 123392 bytes.
#include <mma.h>

#include <cmath>
#include <stdexcept>

#include "engine/cuda/check.h"
#include "engine/cuda/ops/attention_tc.cuh"

namespace shardscope::engine::cuda::attention_detail {
namespace {

namespace wmma = nvcuda::wmma;

template <int kD>
struct TcBackwardTiles {
  static_assert(kD % 16 == 0 && kD <= kTcMaxHeadDim, "head_dim bucket");
  static constexpr int kLd = kD + 8;   // k, v, q, dout rows (16-bit elements)
  static constexpr int kOLd = kD + 4;  // dQ / dK / dV staging rows (floats)
  // A warp's fp32 scratch: S^T and dP^T [16][68] each, later one [16][kOLd] staging tile.
  static constexpr int kScratchFloats =
      2 * 16 * kTcScoreLd > 16 * kOLd ? 2 * 16 * kTcScoreLd : 16 * kOLd;
  // Byte offsets of the tiles; each a multiple of 128 (fragments need 32).
  static constexpr size_t kK = 0;
  static constexpr size_t kV = kK + 2 * kTcTile * kLd;
  static constexpr size_t kQ = kV + 2 * kTcTile * kLd;
  static constexpr size_t kDo = kQ + 2 * kTcTile * kLd;
  static constexpr size_t kPt = kDo + 2 * kTcTile * kLd;
  static constexpr size_t kDst = kPt + 2 * kTcTile * kTcProbLd;
  static constexpr size_t kScratch = kDst + 2 * kTcTile * kTcProbLd;
  static constexpr size_t kLse = kScratch + 4 * kTcWarps * kScratchFloats;
  static constexpr size_t kDelta = kLse + 4 * kTcTile;
  static constexpr size_t kSmemBytes = kDelta + 4 * kTcTile;
  static_assert(kV % 128 == 0 && kQ % 128 == 0 && kDo % 128 == 0 && kPt % 128 == 0 &&
                    kDst % 128 == 0 && kScratch % 128 == 0,
                "tile offsets must keep wmma fragment pointers 32-byte aligned");
  static_assert((16 * 2 * kLd) % 32 == 0 && (16 * 2 * kTcProbLd) % 32 == 0 &&
                    (4 * kScratchFloats) % 32 == 0 && (4 * 16 * kTcScoreLd) % 32 == 0,
                "warp row blocks and scratch slices must start 32-byte aligned");
  static_assert(kLd % 8 == 0 && kTcProbLd % 8 == 0 && kOLd % 4 == 0 && kTcScoreLd % 4 == 0,
                "wmma ldm: a multiple of 8 (16-bit) or 4 (fp32) elements");
};

// grid.x = num_k_tiles * B * Hkv: block x handles key tile x / (B*Hkv) (tile 0,
// the one with the most causal queries, first) of (b, hk) = divmod(x % (B*Hkv),
// Hkv), as attention_backward_kernel.
template <typename Elt, int kD>
__global__ void __launch_bounds__(kTcThreads)
    attention_backward_tc_kernel(const __grid_constant__ AttentionParams p,
                                 const Elt* __restrict__ q, const Elt* __restrict__ k,
                                 const Elt* __restrict__ v, const Elt* __restrict__ dout,
                                 const float* __restrict__ lse, const float* __restrict__ delta,
                                 float* dq_acc, Elt* dk, Elt* dv) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // bf16 wmma needs sm_80
#else
  using Tiles = TcBackwardTiles<kD>;
  constexpr int kLd = Tiles::kLd, kOLd = Tiles::kOLd;
  constexpr int kDBlocks = kD / 16;         // 16-wide column blocks of a head
  constexpr int kRowBlocks = kTcTile / 16;  // 16-row blocks of a tile
  using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, Elt, wmma::row_major>;
  using FragACol = wmma::fragment<wmma::matrix_a, 16, 16, 16, Elt, wmma::col_major>;
  using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, Elt, wmma::row_major>;
  using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, Elt, wmma::col_major>;
  using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

  extern __shared__ __align__(128) unsigned char tc_bwd_smem[];
  Elt* k_s = reinterpret_cast<Elt*>(tc_bwd_smem + Tiles::kK);      // [64][kLd] roped k
  Elt* v_s = reinterpret_cast<Elt*>(tc_bwd_smem + Tiles::kV);      // [64][kLd] v
  Elt* q_s = reinterpret_cast<Elt*>(tc_bwd_smem + Tiles::kQ);      // [64][kLd] roped q * scale
  Elt* do_s = reinterpret_cast<Elt*>(tc_bwd_smem + Tiles::kDo);    // [64][kLd] dout
  Elt* pt_s = reinterpret_cast<Elt*>(tc_bwd_smem + Tiles::kPt);    // [64 keys][72] P^T
  Elt* dst_s = reinterpret_cast<Elt*>(tc_bwd_smem + Tiles::kDst);  // [64 keys][72] dS^T
  float* scratch = reinterpret_cast<float*>(tc_bwd_smem + Tiles::kScratch);
  float* lse_s = reinterpret_cast<float*>(tc_bwd_smem + Tiles::kLse);      // [64]
  float* delta_s = reinterpret_cast<float*>(tc_bwd_smem + Tiles::kDelta);  // [64]

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int row = lane / 2, parity = lane % 2;  // step 2: the lane's key row, column parity
  const int64_t seq = p.seq, n_head = p.n_head, n_kv_head = p.n_kv_head;
  const int head_dim = p.head_dim;
  const BlockCoords block = block_coords(p.batch, n_kv_head);
  const int64_t k_tile = block.tile;
  const int64_t b = block.b, hk = block.head;
  const int64_t k0 = k_tile * kTcTile;
  const int64_t dout_stride = n_head * head_dim;
  const int key_row = 16 * warp + row;  // step 2's key row in the tile

  // The warp's slices: 16 key rows of k_s, v_s, P^T and dS^T, and its scratch.
  const Elt* k_w = k_s + 16 * warp * kLd;
  const Elt* v_w = v_s + 16 * warp * kLd;
  Elt* pt_w = pt_s + 16 * warp * kTcProbLd;
  Elt* dst_w = dst_s + 16 * warp * kTcProbLd;
  float* st_w = scratch + warp * Tiles::kScratchFloats;  // [16][68] S^T
  float* dpt_w = st_w + 16 * kTcScoreLd;                 // [16][68] dP^T
  float* stage_w = st_w;                                 // [16][kOLd] dQ / dK / dV rows

  zero_pad_columns<kD>(k_s, kLd, kTcTile, head_dim);
  zero_pad_columns<kD>(v_s, kLd, kTcTile, head_dim);
  zero_pad_columns<kD>(q_s, kLd, kTcTile, head_dim);
  zero_pad_columns<kD>(do_s, kLd, kTcTile, head_dim);
  const Elt* k_head = head_rows(k, b, seq, p.kv_stride, hk, p.head_stride);
  const Elt* v_head = head_rows(v, b, seq, p.kv_stride, hk, p.head_stride);
  load_tile(k_s, kLd, k_head, p.kv_stride, k0, kTcTile, p, p.rope, 1.0f);
  load_tile(v_s, kLd, v_head, p.kv_stride, k0, kTcTile, p, false, 1.0f);

  FragC dk_acc[kDBlocks], dv_acc[kDBlocks];  // gradients of the warp's roped key / value rows
#pragma unroll
  for (int j = 0; j < kDBlocks; ++j) {
    wmma::fill_fragment(dk_acc[j], 0.0f);
    wmma::fill_fragment(dv_acc[j], 0.0f);
  }

  // Queries before k0 see none of this tile's keys: query tiles start at k_tile
  // (query and key tiles have the same size, so q0 >= k0 below).
  const attention_math::TileRange q_tiles =
      attention_math::backward_query_tiles(k0, kTcTile, seq, p.window, kTcTile);
  const int64_t key = k0 + key_row;  // step 2's key
  for (int64_t g = 0; g < p.group; ++g) {
    const int64_t h = hk * p.group + g;
    const Elt* q_head = head_rows(q, b, seq, p.q_stride, h, p.head_stride);
    const Elt* dout_head = head_rows(dout, b, seq, dout_stride, h, head_dim);
    const float* lse_head = lse + (b * n_head + h) * seq;
    const float* delta_head = delta + (b * n_head + h) * seq;
    float* dq_head = dq_acc + (b * seq * n_head + h) * head_dim;  // row t at + t * dout_stride
    for (int64_t q_tile = q_tiles.first; q_tile <= q_tiles.last; ++q_tile) {
      const int64_t q0 = q_tile * kTcTile;
      __syncthreads();  // every warp is done with q_s, do_s, P^T, dS^T, lse_s of the last tile
      load_tile(q_s, kLd, q_head, p.q_stride, q0, kTcTile, p, p.rope, p.scale);
      load_tile(do_s, kLd, dout_head, dout_stride, q0, kTcTile, p, false, 1.0f);
      for (int r = tid; r < kTcTile; r += kTcThreads) {
        const int64_t t = q0 + r;
        lse_s[r] = t < seq ? lse_head[t] : 0.0f;
        delta_s[r] = t < seq ? delta_head[t] : 0.0f;
      }
      __syncthreads();  // tiles (and, on the first pass, k_s, v_s and pad columns) visible

      // 1. S^T [16 keys][64 queries] = K_w Q^T, dP^T = V_w dO^T.
#pragma unroll 1
      for (int n = 0; n < kRowBlocks; ++n) {
        FragC s_acc, dp_acc;
        wmma::fill_fragment(s_acc, 0.0f);
        wmma::fill_fragment(dp_acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < kDBlocks; ++kk) {
          // Q^T [16 dims][16 queries]: element (d, c) at q_s[(16n + c) * kLd + 16kk + d].
          FragA a;
          FragBCol bt;
          wmma::load_matrix_sync(a, k_w + 16 * kk, kLd);
          wmma::load_matrix_sync(bt, q_s + 16 * n * kLd + 16 * kk, kLd);
          wmma::mma_sync(s_acc, a, bt, s_acc);
          wmma::load_matrix_sync(a, v_w + 16 * kk, kLd);
          wmma::load_matrix_sync(bt, do_s + 16 * n * kLd + 16 * kk, kLd);
          wmma::mma_sync(dp_acc, a, bt, dp_acc);
        }
        wmma::store_matrix_sync(st_w + 16 * n, s_acc, kTcScoreLd, wmma::mem_row_major);
        wmma::store_matrix_sync(dpt_w + 16 * n, dp_acc, kTcScoreLd, wmma::mem_row_major);
      }
      __syncwarp();  // the warp's S^T, dP^T visible to all its lanes

      // 2. P^T = exp(cap(S^T) - lse) where query q0 + c < T sees the key,
      // else 0 (padding query rows and keys past T included: never exp of
      // their scores); dS^T = P^T (dP^T - delta) cap'(S^T).
      {
        const float* st_row = st_w + row * kTcScoreLd;
        const float* dpt_row = dpt_w + row * kTcScoreLd;
        Elt* pt_row = pt_w + row * kTcProbLd;
        Elt* dst_row = dst_w + row * kTcProbLd;
#pragma unroll 4
        for (int j = 0; j < kTcTile / 2; ++j) {
          const int c = 2 * j + parity;
          const int64_t query = q0 + c;
          const bool visible = query < seq && attention_math::key_visible(query, key, p.window);
          float prob = 0.0f, ds = 0.0f;
          if (visible) {
            prob = expf(attention_math::capped_score(st_row[c], p.softcap) - lse_s[c]);
            ds = prob * (dpt_row[c] - delta_s[c]) *
                 attention_math::capped_score_grad(st_row[c], p.softcap);
          }
          Elem<Elt>::store(pt_row, c, prob);
          Elem<Elt>::store(dst_row, c, ds);
        }
      }
      __syncwarp();  // the warp's P^T, dS^T rows visible to all its lanes

      // 3. dV_w += P^T_w dO, dK_w += dS^T_w Q over the tile's 64 queries
      // (j unrolled: dv_acc[j], dk_acc[j] must stay in registers).
#pragma unroll 1
      for (int kk = 0; kk < kRowBlocks; ++kk) {
        FragA pt_frag, dst_frag;
        wmma::load_matrix_sync(pt_frag, pt_w + 16 * kk, kTcProbLd);
        wmma::load_matrix_sync(dst_frag, dst_w + 16 * kk, kTcProbLd);
#pragma unroll
        for (int j = 0; j < kDBlocks; ++j) {
          FragBRow bf;
          wmma::load_matrix_sync(bf, do_s + 16 * kk * kLd + 16 * j, kLd);
          wmma::mma_sync(dv_acc[j], pt_frag, bf, dv_acc[j]);
          wmma::load_matrix_sync(bf, q_s + 16 * kk * kLd + 16 * j, kLd);
          wmma::mma_sync(dk_acc[j], dst_frag, bf, dk_acc[j]);
        }
      }
      __syncthreads();  // every warp's dS^T rows visible

      // 4. dQ rows q0 + 16w + r: dq_acc += sum_c dS[r][c] K[c] (roped space,
      // unscaled); dS [16 queries][16 keys] block (r, c) is element
      // dst_s[(16kk + c) * 72 + 16w + r]: a col_major view at dst_s + 16kk * 72 + 16w.
      {
        FragACol ds_frag[kRowBlocks];
#pragma unroll
        for (int kk = 0; kk < kRowBlocks; ++kk) {
          wmma::load_matrix_sync(ds_frag[kk], dst_s + 16 * kk * kTcProbLd + 16 * warp, kTcProbLd);
        }
        // stage_w aliases st_w / dpt_w, last read by this warp's lanes in step
        // 2, before the barrier above. The j loop is not unrolled: unrolled, the
        // D = 128 instantiations spill (the dK, dV fragments hold 128 registers).
#pragma unroll 1
        for (int j = 0; j < kDBlocks; ++j) {
          FragC acc;
          wmma::fill_fragment(acc, 0.0f);
#pragma unroll
          for (int kk = 0; kk < kRowBlocks; ++kk) {
            FragBRow k_frag;
            wmma::load_matrix_sync(k_frag, k_s + 16 * kk * kLd + 16 * j, kLd);
            wmma::mma_sync(acc, ds_frag[kk], k_frag, acc);
          }
          wmma::store_matrix_sync(stage_w + 16 * j, acc, kOLd, wmma::mem_row_major);
        }
        __syncwarp();  // the warp's dQ rows visible to all its lanes
#pragma unroll 1
        for (int r = 0; r < 16; ++r) {
          const int64_t t = q0 + 16 * warp + r;
          if (t >= seq) break;  // uniform over the warp; later rows are padding too
          float* dq_row = dq_head + t * dout_stride;
          for (int c = lane; c < head_dim; c += 32) atomicAdd(dq_row + c, stage_w[r * kOLd + c]);
        }
      }
      // The next tile's step 1 overwrites st_w / dpt_w (= stage_w) only after
      // the __syncthreads at the top of the loop.
    }
  }

  // dv rows k0 + 16w + r, then dk rows through the RoPE transpose (pairs of
  // dims i, i + D/2 of one row): this block is their only writer.
  __syncwarp();  // every lane is done reading stage_w (the last dQ atomics)
#pragma unroll
  for (int j = 0; j < kDBlocks; ++j)
    wmma::store_matrix_sync(stage_w + 16 * j, dv_acc[j], kOLd, wmma::mem_row_major);
  __syncwarp();
#pragma unroll 1
  for (int r = 0; r < 16; ++r) {
    const int64_t t = k0 + 16 * warp + r;
    if (t >= seq) break;
    Elt* dv_row = dv + (b * seq + t) * p.dkv_stride + hk * p.head_stride;
    for (int c = lane; c < head_dim; c += 32)
      Elem<Elt>::store(dv_row, c, Elem<Elt>::load(dv_row, c) + stage_w[r * kOLd + c]);
  }
  __syncwarp();  // every lane is done reading dV from stage_w
#pragma unroll
  for (int j = 0; j < kDBlocks; ++j)
    wmma::store_matrix_sync(stage_w + 16 * j, dk_acc[j], kOLd, wmma::mem_row_major);
  __syncwarp();
  Elt* dk_head = head_rows(dk, b, seq, p.dkv_stride, hk, p.head_stride);
  const int slots = attention_math::rotary_slots(head_dim, p.rotary_half);
  for (int idx = lane; idx < 16 * slots; idx += 32) {
    const int r = idx / slots, e = idx % slots;
    const int64_t t = k0 + 16 * warp + r;
    if (t < seq)
      add_rotated_back_slot(dk_head + t * p.dkv_stride, stage_w + r * kOLd, e, p.rotary_half, t, p,
                            1.0f);
  }
#endif
}

template <typename Elt, int kD>
void launch_backward_tc_bucket(cudaStream_t s, const AttentionParams& p, const void* q,
                               const void* k, const void* v, const void* dout, const float* lse,
                               const float* delta, float* dq_acc, void* dk, void* dv) {
  using Tiles = TcBackwardTiles<kD>;
  const char* fn = "attention_backward";
  const int64_t blocks = backward_tc_blocks(p);
  require_grid(fn, blocks);
  const auto kernel = attention_backward_tc_kernel<Elt, kD>;
  set_dynamic_smem(reinterpret_cast<const void*>(kernel), Tiles::kSmemBytes, fn);
  kernel<<<static_cast<unsigned>(blocks), kTcThreads, Tiles::kSmemBytes, s>>>(
      p, static_cast<const Elt*>(q), static_cast<const Elt*>(k), static_cast<const Elt*>(v),
      static_cast<const Elt*>(dout), lse, delta, dq_acc, static_cast<Elt*>(dk),
      static_cast<Elt*>(dv));
  SS_CUDA_CHECK_LAUNCH("attention_backward_tc_kernel");
}

template <typename Elt>
void launch_backward_tc_elt(cudaStream_t s, const AttentionParams& p, const void* q, const void* k,
                            const void* v, const void* dout, const float* lse, const float* delta,
                            float* dq_acc, void* dk, void* dv) {
  if (p.head_dim <= 32) {
    launch_backward_tc_bucket<Elt, 32>(s, p, q, k, v, dout, lse, delta, dq_acc, dk, dv);
  } else if (p.head_dim <= 64) {
    launch_backward_tc_bucket<Elt, 64>(s, p, q, k, v, dout, lse, delta, dq_acc, dk, dv);
  } else {
    launch_backward_tc_bucket<Elt, 128>(s, p, q, k, v, dout, lse, delta, dq_acc, dk, dv);
  }
}

}  // namespace

void launch_backward_tc(cudaStream_t s, const AttentionParams& p, ElemType et, const void* q,
                        const void* k, const void* v, const void* dout, const float* lse,
                        const float* delta, float* dq_acc, void* dk, void* dv) {
  switch (et) {
    case ElemType::bf16:
      launch_backward_tc_elt<__nv_bfloat16>(s, p, q, k, v, dout, lse, delta, dq_acc, dk, dv);
      break;
    case ElemType::f16:
      launch_backward_tc_elt<__half>(s, p, q, k, v, dout, lse, delta, dq_acc, dk, dv);
      break;
    default:
      throw std::logic_error("launch_backward_tc: f32 has no tensor-core kernel");
  }
}

}  // namespace shardscope::engine::cuda::attention_detail
