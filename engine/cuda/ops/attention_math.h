// Per-element index math of the fused CUDA attention (attention_*.cu) that
// the kernels share with the host: which keys a query sees (causal, sliding
// window), which tiles a block visits, score soft-capping and its derivative,
// the rotary pairs of a (partially) rotated head. Plain C++ as well as CUDA
// (SS_HD_FORCEINLINE is __host__ __device__ under nvcc, inline otherwise), so the
// host tests (tests/engine/cuda/test_attention_math.cpp) run it against
// cpu::attention_forward / attention_backward on machines without a device.
//
// Semantics are cpu::attention's (engine/cpu/ops.h): query t sees keys j with
// j <= t and, with a sliding window W > 0, j > t - W; with softcap c > 0 the
// scaled score s becomes c * tanh(s / c) before the softmax; RoPE rotates the
// first R = rotary_dim elements of a head (element i < R/2 pairs with
// i + R/2) and passes elements R.. through.
#pragma once

#include <math.h>

#include <cstdint>

#include "engine/cuda/ops/host_device.h"

namespace shardscope::engine::cuda::attention_math {

// ---- masks ------------------------------------------------------------------------------

// True iff query t sees key j: j <= t and (window <= 0 or j > t - window).
SS_HD_FORCEINLINE bool key_visible(int64_t query, int64_t key, int64_t window) {
  return key <= query && (window <= 0 || key > query - window);
}

// The first key query t sees: max(0, t - window + 1) with a window, else 0.
SS_HD_FORCEINLINE int64_t first_visible_key(int64_t query, int64_t window) {
  return window > 0 && query - window + 1 > 0 ? query - window + 1 : 0;
}

// The last query that sees key j: j + window - 1 with a window (clamped to
// seq - 1), else seq - 1.
SS_HD_FORCEINLINE int64_t last_seeing_query(int64_t key, int64_t seq, int64_t window) {
  return window > 0 && key + window - 1 < seq - 1 ? key + window - 1 : seq - 1;
}

// ---- tile ranges ------------------------------------------------------------------------

// Forward: a block of the query tile starting at q0 (rows q0 .. q_last,
// q_last = min(q0 + tile_rows, seq) - 1) visits key tiles first .. last of
// key_tile keys each: every tile holding a key some row sees, and no tile
// wholly before every row's window. The forward's padding rows (q0 + r >=
// seq) take the mask of row seq - 1, whose keys lie in the same range.
struct TileRange {
  int64_t first, last;  // inclusive; first <= last whenever seq >= 1
};
SS_HD_FORCEINLINE TileRange forward_key_tiles(int64_t q0, int tile_rows, int64_t seq,
                                              int64_t window, int key_tile) {
  const int64_t q_last = (q0 + tile_rows < seq ? q0 + tile_rows : seq) - 1;
  return {first_visible_key(q0, window) / key_tile, q_last / key_tile};
}

// Backward: a block of the key tile starting at k0 (key_tile keys) visits the
// query tiles of query_tile rows holding a query that sees one of its keys:
// from the tile of query k0 to the tile of the last query seeing key
// k0 + key_tile - 1.
SS_HD_FORCEINLINE TileRange backward_query_tiles(int64_t k0, int key_tile, int64_t seq,
                                                 int64_t window, int query_tile) {
  const int64_t k_last = (k0 + key_tile < seq ? k0 + key_tile : seq) - 1;
  return {k0 / query_tile, last_seeing_query(k_last, seq, window) / query_tile};
}

// The forward's running max as the exponent offset: a row that has seen no
// visible key yet (max -inf, a window whose keys start in a later tile) uses
// 0, so exp(-inf - offset) = 0 and the correction exp(-inf - offset) = 0
// instead of NaN.
SS_HD_FORCEINLINE float softmax_offset(float running_max) {
  return running_max == -INFINITY ? 0.0f : running_max;
}

// ---- soft-capping -----------------------------------------------------------------------

// th = tanh(s / cap) of a scaled score s (cap > 0); the capped score is
// cap * th and its derivative d capped / d s = 1 - th^2.
SS_HD_FORCEINLINE float softcap_tanh(float score, float cap) {
  return tanhf(score / cap);
}
// The score the softmax sees: cap * tanh(s / cap) when cap > 0, else s.
SS_HD_FORCEINLINE float capped_score(float score, float cap) {
  return cap > 0.0f ? cap * softcap_tanh(score, cap) : score;
}
// d capped / d s at s (1 without a cap).
SS_HD_FORCEINLINE float capped_score_grad(float score, float cap) {
  if (cap <= 0.0f) return 1.0f;
  const float th = softcap_tanh(score, cap);
  return 1.0f - th * th;
}

// ---- rotary embedding -------------------------------------------------------------------

// A head of head_dim elements with its first 2 * half rotated (half = R/2; 0:
// no rotation) is processed as head_dim - half "slots": slot e < half is the
// pair (e, e + half), slot e >= half the pass-through element e + half.
SS_HD_FORCEINLINE int rotary_slots(int head_dim, int half) {
  return head_dim - half;
}
SS_HD_FORCEINLINE bool slot_is_pair(int slot, int half) {
  return slot < half;
}
// The element of a pass-through slot (slot >= half): R .. head_dim - 1.
SS_HD_FORCEINLINE int slot_element(int slot, int half) {
  return slot + half;
}

// The rotation of pair (x1, x2) = (x[i], x[i + R/2]) at angle a:
// y1 = x1 cos - x2 sin, y2 = x2 cos + x1 sin (Hugging Face's rotate_half).
SS_HD_FORCEINLINE void rotate_pair(float x1, float x2, float cos_a, float sin_a, float* y1,
                                   float* y2) {
  *y1 = x1 * cos_a - x2 * sin_a;
  *y2 = x2 * cos_a + x1 * sin_a;
}
// Its transpose (= inverse), for gradients: d1 cos + d2 sin, d2 cos - d1 sin.
SS_HD_FORCEINLINE void rotate_pair_transpose(float d1, float d2, float cos_a, float sin_a,
                                             float* g1, float* g2) {
  *g1 = d1 * cos_a + d2 * sin_a;
  *g2 = d2 * cos_a - d1 * sin_a;
}
// The angle of pair i at position t, in fp32 as torch evaluates it.
SS_HD_FORCEINLINE float rope_angle(int64_t position, float inv_freq) {
  return static_cast<float>(position) * inv_freq;
}

}  // namespace shardscope::engine::cuda::attention_math
