// The fused CUDA attention's index math (engine/cuda/ops/attention_math.h),
// on the host: the masks and tile ranges of sliding windows, soft-capping
// and its derivative, the rotary slots of a partially rotated head. The
// last cases run the kernels' loop structure on the host with these
// functions (query tiles over the key tiles forward_key_tiles gives, with
// the online softmax and its -inf offset; key tiles over the query tiles
// backward_query_tiles gives, dS with cap'(S), dK and dq through the
// transposed rotation slot by slot) and compare with cpu::attention_forward
// / attention_backward, the CPU twin, within fp32 summation-order error.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/attention_math.h"

namespace shardscope::engine::cuda {
namespace {

namespace am = attention_math;
using FVec = std::vector<float>;

TEST_CASE("a sliding window hides keys at or before t - W, causality keys after t") {
  // W = 3: query 5 sees keys 3, 4, 5.
  CHECK_FALSE(am::key_visible(5, 2, 3));
  CHECK(am::key_visible(5, 3, 3));
  CHECK(am::key_visible(5, 5, 3));
  CHECK_FALSE(am::key_visible(5, 6, 3));
  CHECK(am::key_visible(5, 0, 0));  // no window: every earlier key
  CHECK(am::first_visible_key(5, 3) == 3);
  CHECK(am::first_visible_key(1, 3) == 0);
  CHECK(am::last_seeing_query(3, 37, 3) == 5);
  CHECK(am::last_seeing_query(35, 37, 3) == 36);  // clamped to seq - 1
  CHECK(am::last_seeing_query(3, 37, 0) == 36);
}

TEST_CASE("tile ranges skip the tiles wholly outside a window, by hand") {
  // T = 37, W = 5, tiles of 8: query tile 3 (queries 24..31) sees keys 20..31,
  // key tiles 2..3; tiles 0 and 1 are skipped.
  const am::TileRange f = am::forward_key_tiles(24, 8, 37, 5, 8);
  CHECK(f.first == 2);
  CHECK(f.last == 3);
  // The last query tile (32..36, padded to 39) sees keys 28..36: tiles 3..4.
  const am::TileRange l = am::forward_key_tiles(32, 8, 37, 5, 8);
  CHECK(l.first == 3);
  CHECK(l.last == 4);
  // Key tile 1 (keys 8..15) is seen by queries 8..19: query tiles 1..2 of 8.
  const am::TileRange b = am::backward_query_tiles(8, 8, 37, 5, 8);
  CHECK(b.first == 1);
  CHECK(b.last == 2);
  // Without a window: every later query tile.
  CHECK(am::backward_query_tiles(8, 8, 37, 0, 8).last == 4);
  CHECK(am::forward_key_tiles(24, 8, 37, 0, 8).first == 0);
}

TEST_CASE("tile ranges hold every visible (query, key) pair and start and end on one") {
  for (int64_t seq : {1, 7, 16, 37, 64, 65}) {
    for (int64_t window : {0, 1, 2, 5, 16, 40}) {
      for (int tile : {4, 8, 16}) {
        INFO("seq " << seq << " window " << window << " tile " << tile);
        for (int64_t q0 = 0; q0 < seq; q0 += tile) {
          const am::TileRange r = am::forward_key_tiles(q0, tile, seq, window, tile);
          bool first_used = false, last_used = false;
          for (int64_t t = q0; t < std::min<int64_t>(q0 + tile, seq); ++t)
            for (int64_t j = 0; j < seq; ++j) {
              if (!am::key_visible(t, j, window)) continue;
              REQUIRE(j / tile >= r.first);
              REQUIRE(j / tile <= r.last);
              first_used = first_used || j / tile == r.first;
              last_used = last_used || j / tile == r.last;
            }
          CHECK(first_used);
          CHECK(last_used);
        }
        for (int64_t k0 = 0; k0 < seq; k0 += tile) {
          const am::TileRange r = am::backward_query_tiles(k0, tile, seq, window, tile);
          bool first_used = false, last_used = false;
          for (int64_t j = k0; j < std::min<int64_t>(k0 + tile, seq); ++j)
            for (int64_t t = 0; t < seq; ++t) {
              if (!am::key_visible(t, j, window)) continue;
              REQUIRE(t / tile >= r.first);
              REQUIRE(t / tile <= r.last);
              first_used = first_used || t / tile == r.first;
              last_used = last_used || t / tile == r.last;
            }
          CHECK(first_used);
          CHECK(last_used);
        }
      }
    }
  }
}

TEST_CASE("the softmax offset of a row that has seen no key keeps the correction at 0") {
  CHECK(am::softmax_offset(-INFINITY) == 0.0f);
  CHECK(am::softmax_offset(1.5f) == 1.5f);
  CHECK(std::exp(-INFINITY - am::softmax_offset(-INFINITY)) == 0.0f);  // not NaN
}

TEST_CASE("capped scores and their derivative equal cpu::softcap_forward's") {
  const float cap = 2.5f;
  const FVec x = {-9.0f, -1.25f, -0.1f, 0.0f, 0.3f, 2.0f, 7.5f};
  FVec y(x.size()), th(x.size());
  cpu::softcap_forward(x.data(), y.data(), th.data(), static_cast<int64_t>(x.size()), cap);
  for (size_t i = 0; i < x.size(); ++i) {
    CHECK(am::capped_score(x[i], cap) == Approx(y[i]).epsilon(1e-6).margin(1e-7));
    CHECK(am::capped_score_grad(x[i], cap) ==
          Approx(1.0f - th[i] * th[i]).epsilon(1e-6).margin(1e-7));
  }
  CHECK(am::capped_score(3.0f, 0.0f) == 3.0f);  // no cap: the score itself
  CHECK(am::capped_score_grad(3.0f, 0.0f) == 1.0f);
}

TEST_CASE("rotary slots visit every element of a head once: pairs, then pass-through") {
  for (int head_dim : {8, 16, 20}) {
    for (int half : {0, 2, 4, head_dim / 2}) {
      std::vector<int> seen(static_cast<size_t>(head_dim), 0);
      for (int e = 0; e < am::rotary_slots(head_dim, half); ++e) {
        if (am::slot_is_pair(e, half)) {
          ++seen[static_cast<size_t>(e)];
          ++seen[static_cast<size_t>(e + half)];
        } else {
          ++seen[static_cast<size_t>(am::slot_element(e, half))];
        }
      }
      for (int d = 0; d < head_dim; ++d) CHECK(seen[static_cast<size_t>(d)] == 1);
    }
  }
  // GPT-NeoX tiny: head_dim 16, rotary_pct 0.25: R = 4, half 2: 14 slots,
  // slot 2 is element 4 (the first one that does not rotate).
  CHECK(am::rotary_slots(16, 2) == 14);
  CHECK(am::slot_element(2, 2) == 4);
  float y1 = 0, y2 = 0, g1 = 0, g2 = 0;
  am::rotate_pair(1.0f, 2.0f, 0.6f, 0.8f, &y1, &y2);
  CHECK(y1 == Approx(1.0f * 0.6f - 2.0f * 0.8f));
  CHECK(y2 == Approx(2.0f * 0.6f + 1.0f * 0.8f));
  am::rotate_pair_transpose(y1, y2, 0.6f, 0.8f, &g1, &g2);  // the inverse: back to (1, 2)
  CHECK(g1 == Approx(1.0f));
  CHECK(g2 == Approx(2.0f));
}

// ---- the kernels' loop structure on the host ----------------------------------------------

struct Layout {
  cpu::AttentionShape s;
  int64_t q_stride = 0, kv_stride = 0, head_stride = 0;  // inputs (head_stride 0: D)
  int64_t k_off = 0, v_off = 0;                          // k and v in the input buffer
  int64_t dq_stride = 0, dkv_stride = 0;                 // gradients, separate buffers
};

// The tile sizes of the host emulation: small, so windows skip tiles.
constexpr int kTile = 8;

// Row t of head `head` (stride `row_stride`), rotated on its first 2 * half
// elements at position t, times `factor`: load_tile's per-slot math.
FVec load_row(const float* base, int64_t row_stride, int64_t t, const Layout& l, int64_t head,
              bool rope, float factor) {
  const int D = static_cast<int>(l.s.head_dim);
  const int64_t hs = l.head_stride == 0 ? D : l.head_stride;
  const int64_t rdim = l.s.rotary_dim == 0 ? D : l.s.rotary_dim;
  const int half = rope ? static_cast<int>(rdim / 2) : 0;
  const float* src = base + t * row_stride + head * hs;
  FVec y(static_cast<size_t>(D));
  for (int e = 0; e < am::rotary_slots(D, half); ++e) {
    if (am::slot_is_pair(e, half)) {
      const auto inv_freq = static_cast<float>(
          1.0 / std::pow(l.s.rope_theta, static_cast<double>(2 * e) / static_cast<double>(rdim)));
      const float a = am::rope_angle(t, inv_freq);
      float y1, y2;
      am::rotate_pair(src[e], src[e + half], std::cos(a), std::sin(a), &y1, &y2);
      y[static_cast<size_t>(e)] = y1 * factor;
      y[static_cast<size_t>(e + half)] = y2 * factor;
    } else {
      const int d = am::slot_element(e, half);
      y[static_cast<size_t>(d)] = src[d] * factor;
    }
  }
  return y;
}

// dst += R^T (factor * g) at position t, slot by slot (add_rotated_back_slot).
void add_back(float* dst, const FVec& g, int64_t t, const Layout& l, float factor) {
  const int D = static_cast<int>(l.s.head_dim);
  const int64_t rdim = l.s.rotary_dim == 0 ? D : l.s.rotary_dim;
  const int half = l.s.rope ? static_cast<int>(rdim / 2) : 0;
  for (int e = 0; e < am::rotary_slots(D, half); ++e) {
    if (am::slot_is_pair(e, half)) {
      const auto inv_freq = static_cast<float>(
          1.0 / std::pow(l.s.rope_theta, static_cast<double>(2 * e) / static_cast<double>(rdim)));
      const float a = am::rope_angle(t, inv_freq);
      float g1, g2;
      am::rotate_pair_transpose(g[static_cast<size_t>(e)] * factor,
                                g[static_cast<size_t>(e + half)] * factor, std::cos(a), std::sin(a),
                                &g1, &g2);
      dst[e] += g1;
      dst[e + half] += g2;
    } else {
      const int d = am::slot_element(e, half);
      dst[d] += g[static_cast<size_t>(d)] * factor;
    }
  }
}

float dot(const FVec& a, const FVec& b) {
  float s = 0.0f;
  for (size_t d = 0; d < a.size(); ++d) s += a[d] * b[d];
  return s;
}

// The forward kernels' structure: per (b, h, query tile), the key tiles of
// forward_key_tiles, soft-capped masked scores, online softmax.
void emulated_forward(const Layout& l, const FVec& qkv, FVec& out, FVec& lse) {
  const cpu::AttentionShape& s = l.s;
  const int64_t T = s.seq, H = s.n_head, D = s.head_dim, group = s.n_head / s.n_kv_head;
  const auto scale = static_cast<float>(s.scale), cap = static_cast<float>(s.softcap);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t q0 = 0; q0 < T; q0 += kTile) {
        const am::TileRange tiles = am::forward_key_tiles(q0, kTile, T, s.sliding_window, kTile);
        for (int64_t t = q0; t < std::min<int64_t>(q0 + kTile, T); ++t) {
          const FVec qr =
              load_row(qkv.data() + b * T * l.q_stride, l.q_stride, t, l, h, s.rope, scale);
          float row_max = -INFINITY, row_sum = 0.0f;
          FVec acc(static_cast<size_t>(D), 0.0f);
          for (int64_t kt = tiles.first; kt <= tiles.last; ++kt) {
            FVec sc(kTile, -INFINITY);
            float tile_max = -INFINITY;
            for (int c = 0; c < kTile; ++c) {
              const int64_t j = kt * kTile + c;
              if (j >= T || !am::key_visible(t, j, s.sliding_window)) continue;
              const FVec kr = load_row(qkv.data() + l.k_off + b * T * l.kv_stride, l.kv_stride, j,
                                       l, h / group, s.rope, 1.0f);
              sc[static_cast<size_t>(c)] = am::capped_score(dot(qr, kr), cap);
              tile_max = std::max(tile_max, sc[static_cast<size_t>(c)]);
            }
            const float new_max = std::max(row_max, tile_max);
            const float offset = am::softmax_offset(new_max);
            const float correction = std::exp(row_max - offset);
            row_sum *= correction;
            for (float& a : acc) a *= correction;
            for (int c = 0; c < kTile; ++c) {
              const float p = std::exp(sc[static_cast<size_t>(c)] - offset);
              if (p == 0.0f) continue;
              row_sum += p;
              const FVec vr = load_row(qkv.data() + l.v_off + b * T * l.kv_stride, l.kv_stride,
                                       kt * kTile + c, l, h / group, false, 1.0f);
              for (int64_t d = 0; d < D; ++d) acc[static_cast<size_t>(d)] += p * vr[d];
            }
            row_max = new_max;
          }
          for (int64_t d = 0; d < D; ++d)
            out[static_cast<size_t>((b * T + t) * H * D + h * D + d)] =
                acc[static_cast<size_t>(d)] / row_sum;
          lse[static_cast<size_t>((b * H + h) * T + t)] = row_max + std::log(row_sum);
        }
      }
}

// The backward kernels' structure: per (b, kv head, key tile), the query
// tiles of backward_query_tiles; dK in roped space, dq_acc unscaled.
void emulated_backward(const Layout& l, const FVec& qkv, const FVec& out, const FVec& lse,
                       const FVec& dout, FVec& dq, FVec& dk, FVec& dv) {
  const cpu::AttentionShape& s = l.s;
  const int64_t T = s.seq, H = s.n_head, D = s.head_dim, group = s.n_head / s.n_kv_head;
  const int64_t hs = l.head_stride == 0 ? D : l.head_stride;
  const auto scale = static_cast<float>(s.scale), cap = static_cast<float>(s.softcap);
  FVec dq_acc(static_cast<size_t>(s.batch * T * H * D), 0.0f);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t hk = 0; hk < s.n_kv_head; ++hk)
      for (int64_t k0 = 0; k0 < T; k0 += kTile) {
        const am::TileRange tiles = am::backward_query_tiles(k0, kTile, T, s.sliding_window, kTile);
        for (int64_t j = k0; j < std::min<int64_t>(k0 + kTile, T); ++j) {
          const FVec kr = load_row(qkv.data() + l.k_off + b * T * l.kv_stride, l.kv_stride, j, l,
                                   hk, s.rope, 1.0f);
          const FVec vr = load_row(qkv.data() + l.v_off + b * T * l.kv_stride, l.kv_stride, j, l,
                                   hk, false, 1.0f);
          FVec dk_acc(static_cast<size_t>(D), 0.0f), dv_acc(static_cast<size_t>(D), 0.0f);
          for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
            for (int64_t t = tiles.first * kTile;
                 t < std::min<int64_t>((tiles.last + 1) * kTile, T); ++t) {
              if (!am::key_visible(t, j, s.sliding_window)) continue;
              const FVec qr =
                  load_row(qkv.data() + b * T * l.q_stride, l.q_stride, t, l, h, s.rope, scale);
              const float* g = dout.data() + (b * T + t) * H * D + h * D;
              const float* o = out.data() + (b * T + t) * H * D + h * D;
              float delta = 0.0f, dp = 0.0f;
              for (int64_t d = 0; d < D; ++d) {
                delta += g[d] * o[d];
                dp += g[d] * vr[static_cast<size_t>(d)];
              }
              const float score = dot(qr, kr);
              const float p = std::exp(am::capped_score(score, cap) -
                                       lse[static_cast<size_t>((b * H + h) * T + t)]);
              const float ds = p * (dp - delta) * am::capped_score_grad(score, cap);
              float* dqa = dq_acc.data() + ((b * T + t) * H + h) * D;
              for (int64_t d = 0; d < D; ++d) {
                dv_acc[static_cast<size_t>(d)] += p * g[d];
                dk_acc[static_cast<size_t>(d)] += ds * qr[static_cast<size_t>(d)];
                dqa[d] += ds * kr[static_cast<size_t>(d)];
              }
            }
          float* dkr = dk.data() + (b * T + j) * l.dkv_stride + hk * hs;
          float* dvr = dv.data() + (b * T + j) * l.dkv_stride + hk * hs;
          add_back(dkr, dk_acc, j, l, 1.0f);
          for (int64_t d = 0; d < D; ++d) dvr[d] += dv_acc[static_cast<size_t>(d)];
        }
      }
  for (int64_t bt = 0; bt < s.batch * T; ++bt)
    for (int64_t h = 0; h < H; ++h) {
      const float* a = dq_acc.data() + (bt * H + h) * D;
      add_back(dq.data() + bt * l.dq_stride + h * hs, FVec(a, a + D), bt % T, l, scale);
    }
}

FVec random_values(std::mt19937_64& rng, int64_t n) {
  std::uniform_real_distribution<float> magnitude(0.1f, 1.0f);
  std::bernoulli_distribution negative(0.5);
  FVec x(static_cast<size_t>(n));
  for (float& v : x) v = negative(rng) ? -magnitude(rng) : magnitude(rng);
  return x;
}

void require_close(const FVec& got, const FVec& ref, double atol, double rtol) {
  REQUIRE(got.size() == ref.size());
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(std::fabs(static_cast<double>(got[i]) - ref[i]) <= atol + rtol * std::fabs(ref[i]))) {
      if (bad < 3) UNSCOPED_INFO("[" << i << "] got " << got[i] << " ref " << ref[i]);
      ++bad;
    }
  REQUIRE(bad == 0);
}

// A packed input [B, T, row] with q at 0, k at k_off, v at v_off; the
// gradients of q in [B, T, dq_stride] and of k, v in [B, T, dkv_stride]
// buffers (separate from the input's layout, as with copied k and v).
void check_against_cpu(const Layout& l) {
  const cpu::AttentionShape& s = l.s;
  const int64_t rows = s.batch * s.seq, hd = s.n_head * s.head_dim;
  std::mt19937_64 rng(7);
  const FVec qkv = random_values(rng, rows * l.q_stride);
  const FVec dout = random_values(rng, rows * hd);
  const FVec dq0 = random_values(rng, rows * l.dq_stride);
  const FVec dk0 = random_values(rng, rows * l.dkv_stride);
  const FVec dv0 = random_values(rng, rows * l.dkv_stride);

  const cpu::QkvView view{qkv.data(), qkv.data() + l.k_off, qkv.data() + l.v_off,
                          l.q_stride, l.kv_stride,          l.head_stride};
  FVec out_ref(static_cast<size_t>(rows * hd)), lse_ref(static_cast<size_t>(rows * s.n_head));
  cpu::attention_forward(s, view, out_ref.data(), lse_ref.data());
  FVec out(out_ref.size()), lse(lse_ref.size());
  emulated_forward(l, qkv, out, lse);
  require_close(out, out_ref, 1e-5, 1e-4);
  require_close(lse, lse_ref, 1e-5, 1e-5);

  FVec dq_ref = dq0, dk_ref = dk0, dv_ref = dv0;
  const cpu::QkvGrad grad{dq_ref.data(), dk_ref.data(), dv_ref.data(),
                          l.dq_stride,   l.dkv_stride,  l.head_stride};
  cpu::attention_backward(s, view, out_ref.data(), lse_ref.data(), dout.data(), grad);
  FVec dq = dq0, dk = dk0, dv = dv0;
  emulated_backward(l, qkv, out_ref, lse_ref, dout, dq, dk, dv);
  require_close(dq, dq_ref, 1e-5, 1e-4);
  require_close(dk, dk_ref, 1e-5, 1e-4);
  require_close(dv, dv_ref, 1e-5, 1e-4);
}

// Packed [q: H*D | k: Hkv*D | v: Hkv*D] rows (Phi-3's qkv_proj), gradients dense.
Layout packed_layout(const cpu::AttentionShape& s) {
  Layout l;
  l.s = s;
  const int64_t hd = s.n_head * s.head_dim, kvd = s.n_kv_head * s.head_dim;
  l.q_stride = l.kv_stride = hd + 2 * kvd;
  l.k_off = hd;
  l.v_off = hd + kvd;
  l.dq_stride = hd;
  l.dkv_stride = kvd;
  return l;
}

cpu::AttentionShape base_shape() {
  cpu::AttentionShape s;
  s.batch = 2;
  s.seq = 37;  // 5 tiles of 8, the last partial
  s.n_head = 4;
  s.n_kv_head = 2;
  s.head_dim = 12;
  s.scale = 0.3;
  s.rope = true;
  return s;
}

TEST_CASE("emulated kernels equal the CPU twin with a sliding window (tiles skipped)") {
  cpu::AttentionShape s = base_shape();
  for (int64_t window : {1, 5, 8, 13, 40}) {
    INFO("window " << window);
    s.sliding_window = window;
    check_against_cpu(packed_layout(s));
  }
}

TEST_CASE("emulated kernels equal the CPU twin with soft-capped scores") {
  cpu::AttentionShape s = base_shape();
  s.scale = 2.0;  // scores of a few units: the cap bends them
  s.softcap = 1.5;
  check_against_cpu(packed_layout(s));
  s.sliding_window = 6;  // Gemma 2's sliding layers: both
  check_against_cpu(packed_layout(s));
}

TEST_CASE("emulated kernels equal the CPU twin with partial rotary (rotary_dim < head_dim)") {
  cpu::AttentionShape s = base_shape();
  for (int64_t rotary_dim : {2, 4, 12}) {
    INFO("rotary_dim " << rotary_dim);
    s.rotary_dim = rotary_dim;
    check_against_cpu(packed_layout(s));
  }
}

TEST_CASE("emulated kernels equal the CPU twin on GPT-NeoX's per-head [H, 3, D] qkv") {
  cpu::AttentionShape s = base_shape();
  s.n_kv_head = s.n_head;
  s.rotary_dim = 4;
  Layout l;
  l.s = s;
  const int64_t D = s.head_dim, hd = s.n_head * D;
  l.q_stride = l.kv_stride = l.dq_stride = l.dkv_stride = 3 * hd;
  l.head_stride = 3 * D;
  l.k_off = D;
  l.v_off = 2 * D;
  check_against_cpu(l);
}

}  // namespace
}  // namespace shardscope::engine::cuda
