// Fused causal attention forward on the tensor cores (WMMA, bf16/f16 tiles,
// fp32 accumulators): the FlashAttention-2 loop of attention_forward.cu with
// the two products S = Q K^T and O += P V on mma_sync.
//
// Block: 4 warps, a query tile of 64 rows (warp w owns rows 16w .. 16w + 15),
// key tiles of 64 (those some row sees: attention_math.h forward_key_tiles,
// which skips tiles wholly before a sliding window). Per key tile each warp
//  1. computes its S [16, 64] with wmma (K^T: a col_major matrix_b view of
//     the row-major k tile) into its fp32 scratch;
//  2. soft-caps and masks it and runs the online softmax on it: lanes 2r
//     and 2r + 1 own row r (columns
//     c = 2j + lane % 2), keep the row's running max and sum in registers,
//     write P rounded to 16 bits into the warp's P tile and rescale the
//     warp's fp32 O rows in shared memory by the correction;
//  3. loads its O rows as accumulator fragments, adds P V (V: row_major
//     matrix_b) and stores them back.
// At the end out = O / sum and lse = max + log(sum), as the SIMT forward.
// Q's fragments stay in registers for the whole block.
//
// Shared memory per block (kD: the head_dim bucket 32, 64 or 128):
//   q, k, v [64][kD + 8] 16-bit, S [64][68] fp32, P [64][72] 16-bit,
//   O [64][kD + 4] fp32: 51200, 71680 and 112640 bytes.
#include <mma.h>

#include <cmath>
#include <stdexcept>

#include "engine/cuda/check.h"
#include "engine/cuda/ops/attention_tc.cuh"

namespace shardscope::engine::cuda::attention_detail {
namespace {

namespace wmma = nvcuda::wmma;

template <int kD>
struct TcForwardTiles {
  static_assert(kD % 16 == 0 && kD <= kTcMaxHeadDim, "head_dim bucket");
  static constexpr int kLd = kD + 8;   // q, k, v rows (16-bit elements)
  static constexpr int kOLd = kD + 4;  // O rows (floats)
  // Byte offsets of the tiles; each a multiple of 128 (fragments need 32).
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + 2 * kTcTile * kLd;
  static constexpr size_t kV = kK + 2 * kTcTile * kLd;
  static constexpr size_t kS = kV + 2 * kTcTile * kLd;
  static constexpr size_t kP = kS + 4 * kTcTile * kTcScoreLd;
  static constexpr size_t kO = kP + 2 * kTcTile * kTcProbLd;
  static constexpr size_t kSmemBytes = kO + 4 * kTcTile * kOLd;
  static_assert(kK % 128 == 0 && kV % 128 == 0 && kS % 128 == 0 && kP % 128 == 0 && kO % 128 == 0,
                "tile offsets must keep wmma fragment pointers 32-byte aligned");
  // Per-warp row offsets (16 rows) in bytes must be multiples of 32 too.
  static_assert((16 * 2 * kLd) % 32 == 0 && (16 * 4 * kTcScoreLd) % 32 == 0 &&
                    (16 * 2 * kTcProbLd) % 32 == 0 && (16 * 4 * kOLd) % 32 == 0,
                "warp row blocks must start 32-byte aligned");
  static_assert(kLd % 8 == 0 && kTcProbLd % 8 == 0 && kOLd % 4 == 0 && kTcScoreLd % 4 == 0,
                "wmma ldm: a multiple of 8 (16-bit) or 4 (fp32) elements");
};

// grid.x = num_q_tiles * B * H: block x handles query tile
// num_q_tiles - 1 - x / (B*H) (the longest causal rows start first) of
// (b, h) = divmod(x % (B*H), H), as attention_forward_kernel.
template <typename Elt, int kD>
__global__ void __launch_bounds__(kTcThreads)
    attention_forward_tc_kernel(const __grid_constant__ AttentionParams p,
                                const Elt* __restrict__ q, const Elt* __restrict__ k,
                                const Elt* __restrict__ v, Elt* out, float* lse,
                                int64_t num_q_tiles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // bf16 wmma needs sm_80; the launcher is never reached on older builds' devices
#else
  using Tiles = TcForwardTiles<kD>;
  constexpr int kLd = Tiles::kLd, kOLd = Tiles::kOLd;
  constexpr int kDBlocks = kD / 16;         // 16-wide column blocks of a head
  constexpr int kKeyBlocks = kTcTile / 16;  // 16-wide key blocks of a key tile
  using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, Elt, wmma::row_major>;
  using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, Elt, wmma::row_major>;
  using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, Elt, wmma::col_major>;
  using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

  extern __shared__ __align__(128) unsigned char tc_fwd_smem[];
  Elt* q_s = reinterpret_cast<Elt*>(tc_fwd_smem + Tiles::kQ);      // [64][kLd] roped q * scale
  Elt* k_s = reinterpret_cast<Elt*>(tc_fwd_smem + Tiles::kK);      // [64][kLd] roped k
  Elt* v_s = reinterpret_cast<Elt*>(tc_fwd_smem + Tiles::kV);      // [64][kLd] v
  float* s_s = reinterpret_cast<float*>(tc_fwd_smem + Tiles::kS);  // [64][68] scores
  Elt* p_s = reinterpret_cast<Elt*>(tc_fwd_smem + Tiles::kP);      // [64][72] probabilities
  float* o_s = reinterpret_cast<float*>(tc_fwd_smem + Tiles::kO);  // [64][kOLd] unnormalised O

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int row = lane / 2, parity = lane % 2;  // softmax: the lane's row, column parity
  const int64_t seq = p.seq, n_head = p.n_head;
  const int head_dim = p.head_dim;
  const BlockCoords block = block_coords(p.batch, n_head);
  const int64_t q_tile = num_q_tiles - 1 - block.tile;
  const int64_t b = block.b, h = block.head;
  const int64_t hk = h / p.group;
  const int64_t q0 = q_tile * kTcTile;

  const Elt* q_head = head_rows(q, b, seq, p.q_stride, h, p.head_stride);
  const Elt* k_head = head_rows(k, b, seq, p.kv_stride, hk, p.head_stride);
  const Elt* v_head = head_rows(v, b, seq, p.kv_stride, hk, p.head_stride);

  // The warp's slices: 16 query rows of q_s, S, P and O.
  const Elt* q_w = q_s + 16 * warp * kLd;
  float* s_w = s_s + 16 * warp * kTcScoreLd;
  Elt* p_w = p_s + 16 * warp * kTcProbLd;
  float* o_w = o_s + 16 * warp * kOLd;

  zero_pad_columns<kD>(q_s, kLd, kTcTile, head_dim);
  zero_pad_columns<kD>(k_s, kLd, kTcTile, head_dim);
  zero_pad_columns<kD>(v_s, kLd, kTcTile, head_dim);
  for (int idx = tid; idx < kTcTile * kOLd; idx += kTcThreads) o_s[idx] = 0.0f;
  load_tile(q_s, kLd, q_head, p.q_stride, q0, kTcTile, p, p.rope, p.scale);
  __syncthreads();  // q_s (and the zeroed O and pad columns) visible

  FragA q_frag[kDBlocks];  // the warp's 16 query rows, for every key tile
#pragma unroll
  for (int kk = 0; kk < kDBlocks; ++kk) wmma::load_matrix_sync(q_frag[kk], q_w + 16 * kk, kLd);

  // Running max and sum of the lane's row (both lanes of a pair hold them).
  // The max stays -inf until the row sees a key (a sliding window may start
  // after the first tile): attention_math::softmax_offset keeps the exponents
  // finite meanwhile.
  float row_max = -INFINITY, row_sum = 0.0f;
  const int r_tile = 16 * warp + row;  // the lane's row in the query tile
  // The row's mask: padding rows (past seq) take row seq - 1's.
  const int64_t row_query = q0 + r_tile < seq ? q0 + r_tile : seq - 1;

  const attention_math::TileRange k_tiles =
      attention_math::forward_key_tiles(q0, kTcTile, seq, p.window, kTcTile);
  for (int64_t k_tile = k_tiles.first; k_tile <= k_tiles.last; ++k_tile) {
    const int64_t k0 = k_tile * kTcTile;
    __syncthreads();  // every warp is done reading k_s, v_s of the previous tile
    load_tile(k_s, kLd, k_head, p.kv_stride, k0, kTcTile, p, p.rope, 1.0f);
    load_tile(v_s, kLd, v_head, p.kv_stride, k0, kTcTile, p, false, 1.0f);
    __syncthreads();  // k_s, v_s visible

    // S [16 queries][64 keys] = Q_w K^T (Q carries the scale).
#pragma unroll
    for (int n = 0; n < kKeyBlocks; ++n) {
      FragC acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < kDBlocks; ++kk) {
        // K^T [16 dims][16 keys]: element (d, c) at k_s[(16n + c) * kLd + 16kk + d].
        FragBCol k_frag;
        wmma::load_matrix_sync(k_frag, k_s + 16 * n * kLd + 16 * kk, kLd);
        wmma::mma_sync(acc, q_frag[kk], k_frag, acc);
      }
      wmma::store_matrix_sync(s_w + 16 * n, acc, kTcScoreLd, wmma::mem_row_major);
    }
    __syncwarp();  // the warp's S visible to all its lanes

    // Soft-capping, the mask and online softmax of row `row`, columns c = 2j + parity.
    {
      const float* s_row = s_w + row * kTcScoreLd;
      Elt* p_row = p_w + row * kTcProbLd;
      float sv[kTcTile / 2];
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kTcTile / 2; ++j) {
        const int c = 2 * j + parity;
        sv[j] = attention_math::key_visible(row_query, k0 + c, p.window)
                    ? attention_math::capped_score(s_row[c], p.softcap)
                    : -INFINITY;
        tile_max = fmaxf(tile_max, sv[j]);
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      const float new_max = fmaxf(row_max, tile_max);  // -inf until the row sees a key
      const float offset = attention_math::softmax_offset(new_max);
      const float correction = expf(row_max - offset);  // 0 until the row saw a key
      float tile_sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kTcTile / 2; ++j) {
        const float prob = expf(sv[j] - offset);  // 0 where masked
        tile_sum += prob;
        Elem<Elt>::store(p_row, 2 * j + parity, prob);
      }
      tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
      row_sum = row_sum * correction + tile_sum;
      row_max = new_max;
      float* o_row = o_w + row * kOLd;
#pragma unroll 4
      for (int c = parity; c < kD; c += 2) o_row[c] *= correction;
    }
    __syncwarp();  // P and the rescaled O rows visible to all lanes

    // O_w [16][kD] += P [16][64] V [64][kD]; masked / padding keys have
    // probability 0 and zero rows of v.
    FragA p_frag[kKeyBlocks];
#pragma unroll
    for (int kk = 0; kk < kKeyBlocks; ++kk)
      wmma::load_matrix_sync(p_frag[kk], p_w + 16 * kk, kTcProbLd);
#pragma unroll
    for (int j = 0; j < kDBlocks; ++j) {
      FragC acc;
      wmma::load_matrix_sync(acc, o_w + 16 * j, kOLd, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kKeyBlocks; ++kk) {
        FragBRow v_frag;
        wmma::load_matrix_sync(v_frag, v_s + 16 * kk * kLd + 16 * j, kLd);
        wmma::mma_sync(acc, p_frag[kk], v_frag, acc);
      }
      wmma::store_matrix_sync(o_w + 16 * j, acc, kOLd, wmma::mem_row_major);
    }
    // No barrier here: the next tile's softmax writes s_w / p_w / o_w only
    // after the two __syncthreads at the top of the loop.
  }
  __syncwarp();  // the warp's final O rows visible to all lanes

  // out [B, T, H*D] for the warp's valid rows (a row per pass, coalesced over
  // its dims) and lse [B, H, T].
  const float inv_sum = 1.0f / row_sum;
#pragma unroll 1
  for (int r = 0; r < 16; ++r) {
    const float inv = __shfl_sync(0xffffffffu, inv_sum, 2 * r);
    const int64_t t = q0 + 16 * warp + r;
    if (t >= seq) break;  // uniform over the warp; later rows are padding too
    Elt* out_row = out + ((b * seq + t) * n_head + h) * head_dim;
    for (int c = lane; c < head_dim; c += 32) Elem<Elt>::store(out_row, c, o_w[r * kOLd + c] * inv);
  }
  const int64_t query = q0 + r_tile;
  if (parity == 0 && query < seq) lse[(b * n_head + h) * seq + query] = row_max + logf(row_sum);
#endif
}

template <typename Elt, int kD>
void launch_forward_tc_bucket(cudaStream_t s, const AttentionParams& p, const void* q,
                              const void* k, const void* v, void* out, float* lse) {
  using Tiles = TcForwardTiles<kD>;
  const char* fn = "attention_forward";
  const int64_t num_q_tiles = (p.seq + kTcTile - 1) / kTcTile;
  const int64_t blocks = num_q_tiles * p.batch * p.n_head;
  require_grid(fn, blocks);
  const auto kernel = attention_forward_tc_kernel<Elt, kD>;
  set_dynamic_smem(reinterpret_cast<const void*>(kernel), Tiles::kSmemBytes, fn);
  kernel<<<static_cast<unsigned>(blocks), kTcThreads, Tiles::kSmemBytes, s>>>(
      p, static_cast<const Elt*>(q), static_cast<const Elt*>(k), static_cast<const Elt*>(v),
      static_cast<Elt*>(out), lse, num_q_tiles);
  SS_CUDA_CHECK_LAUNCH("attention_forward_tc_kernel");
}

template <typename Elt>
void launch_forward_tc_elt(cudaStream_t s, const AttentionParams& p, const void* q, const void* k,
                           const void* v, void* out, float* lse) {
  if (p.head_dim <= 32) {
    launch_forward_tc_bucket<Elt, 32>(s, p, q, k, v, out, lse);
  } else if (p.head_dim <= 64) {
    launch_forward_tc_bucket<Elt, 64>(s, p, q, k, v, out, lse);
  } else {
    launch_forward_tc_bucket<Elt, 128>(s, p, q, k, v, out, lse);
  }
}

}  // namespace

void launch_forward_tc(cudaStream_t s, const AttentionParams& p, ElemType et, const void* q,
                       const void* k, const void* v, void* out, float* lse) {
  switch (et) {
    case ElemType::bf16:
      launch_forward_tc_elt<__nv_bfloat16>(s, p, q, k, v, out, lse);
      break;
    case ElemType::f16:
      launch_forward_tc_elt<__half>(s, p, q, k, v, out, lse);
      break;
    default:
      throw std::logic_error("launch_forward_tc: f32 has no tensor-core kernel");
  }
}

}  // namespace shardscope::engine::cuda::attention_detail
