// Causal attention (packed GPT-2 layout, separate q/k/v with GQA, RoPE, scale,
// softcap, sliding window, T = 1) against the float64 reference and central differences, plus the
// causal mask, GQA equivalence and argument checks.
#include <cmath>
#include <random>
#include <stdexcept>

#include "engine/cpu/ops.h"
#include "tests/engine/cpu/grad_check.h"
#include "tests/engine/cpu/ref_ops.h"

namespace shardscope::engine::cpu::test {
namespace {

// q, k, v of one attention call and where they live: packed (one [B, T, 3*H*D]
// buffer, H == Hkv) or three separate tensors.
struct Inputs {
  AttentionShape s;
  bool packed = false;
  FVec q, k, v;  // packed: q holds the whole buffer, k and v are empty
  int64_t q_stride = 0, kv_stride = 0;

  int64_t rows() const { return s.batch * s.seq; }
  QkvView view() const {
    if (packed) {
      const int64_t hd = s.n_head * s.head_dim;
      return {q.data(), q.data() + hd, q.data() + 2 * hd, q_stride, kv_stride};
    }
    return {q.data(), k.data(), v.data(), q_stride, kv_stride};
  }
};

Inputs make_inputs(const AttentionShape& s, bool packed, std::mt19937_64& rng) {
  Inputs in;
  in.s = s;
  in.packed = packed;
  const int64_t hd = s.n_head * s.head_dim, kvd = s.n_kv_head * s.head_dim;
  // Magnitudes up to 2 make the softmax clearly non-uniform at these small D.
  if (packed) {
    REQUIRE(s.n_head == s.n_kv_head);
    in.q = random_values(rng, in.rows() * 3 * hd, 0.1, 2.0);
    in.q_stride = in.kv_stride = 3 * hd;
  } else {
    in.q = random_values(rng, in.rows() * hd, 0.1, 2.0);
    in.k = random_values(rng, in.rows() * kvd, 0.1, 2.0);
    in.v = random_values(rng, in.rows() * kvd, 0.1, 2.0);
    in.q_stride = hd;
    in.kv_stride = kvd;
  }
  return in;
}

// Reference over double copies laid out like `in` (q/k/v may be the one buffer).
AttentionRef reference(const Inputs& in, const Vec& q, const Vec& k, const Vec& v) {
  if (in.packed) {
    const int64_t hd = in.s.n_head * in.s.head_dim;
    return attention_ref(in.s, q.data(), q.data() + hd, q.data() + 2 * hd, in.q_stride,
                         in.kv_stride);
  }
  return attention_ref(in.s, q.data(), k.data(), v.data(), in.q_stride, in.kv_stride);
}

struct Grads {
  FVec dq, dk, dv;
};

Grads run_backward(const Inputs& in, const FVec& out, const FVec& lse, const FVec& dout, Grads g) {
  if (in.packed) {
    const int64_t hd = in.s.n_head * in.s.head_dim;
    float* base = g.dq.data();
    attention_backward(in.s, in.view(), out.data(), lse.data(), dout.data(),
                       {base, base + hd, base + 2 * hd, in.q_stride, in.kv_stride});
  } else {
    attention_backward(in.s, in.view(), out.data(), lse.data(), dout.data(),
                       {g.dq.data(), g.dk.data(), g.dv.data(), in.q_stride, in.kv_stride});
  }
  return g;
}

void check_attention(const AttentionShape& s, bool packed, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Inputs in = make_inputs(s, packed, rng);
  const int64_t hd = s.n_head * s.head_dim;
  const Vec qd = to_double(in.q), kd = to_double(in.k), vd = to_double(in.v);

  FVec out(in.rows() * hd), lse(s.batch * s.n_head * s.seq);
  attention_forward(s, in.view(), out.data(), lse.data());
  const AttentionRef ref = reference(in, qd, kd, vd);
  check_close(out, ref.out, kForwardTol, "out");
  check_close(lse, ref.lse, kForwardTol, "lse");

  const FVec dout = random_values(rng, out.size());
  const Vec doutd = to_double(dout);
  Grads g0{random_values(rng, in.q.size()), random_values(rng, in.k.size()),
           random_values(rng, in.v.size())};
  const Grads g = run_backward(in, out, lse, dout, g0);

  check_close(
      g.dq,
      numeric_grad([&](const Vec& x) { return dot(doutd, reference(in, x, kd, vd).out); }, qd),
      kGradTol, packed ? "d(packed qkv)" : "dq", g0.dq);
  if (!packed) {
    check_close(
        g.dk,
        numeric_grad([&](const Vec& x) { return dot(doutd, reference(in, qd, x, vd).out); }, kd),
        kGradTol, "dk", g0.dk);
    check_close(
        g.dv,
        numeric_grad([&](const Vec& x) { return dot(doutd, reference(in, qd, kd, x).out); }, vd),
        kGradTol, "dv", g0.dv);
  }
}

AttentionShape shape(int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t d, double scale,
                     bool rope, double theta = 10000.0) {
  AttentionShape s;
  s.batch = b;
  s.seq = t;
  s.n_head = h;
  s.n_kv_head = hkv;
  s.head_dim = d;
  s.scale = scale;
  s.rope = rope;
  s.rope_theta = theta;
  return s;
}

}  // namespace

TEST_CASE("attention packed GPT-2 qkv layout (scale 1/sqrt(D)) matches reference and differences") {
  check_attention(shape(2, 5, 3, 3, 4, 0.5, false), true, 41);
}

TEST_CASE("attention separate q/k/v with GQA (H=4, Hkv=2, scale 0.7) matches reference") {
  check_attention(shape(2, 4, 4, 2, 4, 0.7, false), false, 42);
}

TEST_CASE("attention with RoPE (rotate_half, theta 100) and GQA matches reference") {
  // theta 100 with D = 8 turns every pair by a clearly non-zero angle at t >= 1.
  check_attention(shape(2, 5, 4, 2, 8, 1.0 / std::sqrt(8.0), true, 100.0), false, 43);
}

TEST_CASE("attention with RoPE at Llama's theta 500000 and scale 1 matches reference") {
  check_attention(shape(1, 6, 2, 1, 6, 1.0, true, 500000.0), false, 44);
}

TEST_CASE("attention with score softcap 1.5 (Gemma 2) and GQA matches reference and differences") {
  AttentionShape s = shape(2, 5, 4, 2, 4, 0.9, true, 100.0);
  s.softcap = 1.5;  // inputs up to 2 in magnitude: scores reach the tanh's curved part
  check_attention(s, false, 1501);
}

TEST_CASE("attention with sliding window 3 (T=7) and GQA matches reference and differences") {
  AttentionShape s = shape(2, 7, 4, 2, 4, 0.8, true, 100.0);
  s.sliding_window = 3;
  check_attention(s, false, 1502);
  s.softcap = 2.0;  // both at once
  check_attention(s, false, 1503);
}

TEST_CASE("attention with sliding window 1: each query sees only itself, output is its v") {
  AttentionShape s = shape(1, 4, 2, 1, 2, 1.0, false);
  s.sliding_window = 1;
  std::mt19937_64 rng(1504);
  const Inputs in = make_inputs(s, false, rng);
  FVec out(4 * 2 * 2), lse(2 * 4);
  attention_forward(s, in.view(), out.data(), lse.data());
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t d = 0; d < 2; ++d) CHECK(out[t * 4 + h * 2 + d] == in.v[t * 2 + d]);
}

TEST_CASE("attention with T=1: output is v, dq and dk are zero, dv is dout summed over the group") {
  const AttentionShape s = shape(3, 1, 4, 2, 4, 0.5, true);
  check_attention(s, false, 45);
  std::mt19937_64 rng(46);
  const Inputs in = make_inputs(s, false, rng);
  FVec out(3 * 16), lse(3 * 4);
  attention_forward(s, in.view(), out.data(), lse.data());
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t h = 0; h < 4; ++h) {
      // One key: lse is its scaled score (RoPE at t = 0 is the identity).
      double q_dot_k = 0.0;
      for (int64_t d = 0; d < 4; ++d)
        q_dot_k += static_cast<double>(in.q[b * 16 + h * 4 + d]) * in.k[b * 8 + (h / 2) * 4 + d];
      CHECK(lse[b * 4 + h] == Approx(0.5 * q_dot_k).margin(1e-6));
      for (int64_t d = 0; d < 4; ++d)
        CHECK(out[b * 16 + h * 4 + d] == Approx(in.v[b * 8 + (h / 2) * 4 + d]).margin(1e-7));
    }
  const FVec dout = random_values(rng, out.size());
  const Grads g =
      run_backward(in, out, lse, dout,
                   {FVec(in.q.size(), 0.0f), FVec(in.k.size(), 0.0f), FVec(in.v.size(), 0.0f)});
  for (float x : g.dq) CHECK(std::fabs(x) <= 1e-6f);
  for (float x : g.dk) CHECK(std::fabs(x) <= 1e-6f);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t hk = 0; hk < 2; ++hk)
      for (int64_t d = 0; d < 4; ++d)
        CHECK(g.dv[b * 8 + hk * 4 + d] ==
              Approx(dout[b * 16 + (2 * hk) * 4 + d] + dout[b * 16 + (2 * hk + 1) * 4 + d])
                  .margin(1e-6));
}

TEST_CASE("attention causal mask: output at t is unchanged when k or v at t' > t change") {
  const AttentionShape s = shape(1, 6, 2, 1, 4, 0.5, true);
  std::mt19937_64 rng(47);
  Inputs in = make_inputs(s, false, rng);
  FVec out_a(6 * 8), out_b(6 * 8), lse(2 * 6);
  attention_forward(s, in.view(), out_a.data(), lse.data());
  const int64_t changed = 3;  // rows >= 3 of k and v get new values
  for (int64_t t = changed; t < 6; ++t)
    for (int64_t d = 0; d < 4; ++d) {
      in.k[t * 4 + d] += 0.75f;
      in.v[t * 4 + d] -= 1.25f;
    }
  attention_forward(s, in.view(), out_b.data(), lse.data());
  for (int64_t t = 0; t < changed; ++t)
    for (int64_t c = 0; c < 8; ++c) CHECK(out_a[t * 8 + c] == out_b[t * 8 + c]);
  for (int64_t t = changed; t < 6; ++t) {
    double diff = 0.0;
    for (int64_t c = 0; c < 8; ++c) diff += std::fabs(out_a[t * 8 + c] - out_b[t * 8 + c]);
    CHECK(diff > 1e-3);  // rows that see the change do change
  }
}

TEST_CASE("attention GQA (Hkv=2) equals MHA (Hkv=H=4) with each kv head duplicated") {
  const AttentionShape gqa = shape(2, 5, 4, 2, 4, 0.5, true);
  AttentionShape mha = gqa;
  mha.n_kv_head = 4;
  std::mt19937_64 rng(48);
  const Inputs in = make_inputs(gqa, false, rng);
  const int64_t rows = in.rows();
  FVec k_dup(rows * 16), v_dup(rows * 16);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t d = 0; d < 4; ++d) {
        k_dup[r * 16 + h * 4 + d] = in.k[r * 8 + (h / 2) * 4 + d];
        v_dup[r * 16 + h * 4 + d] = in.v[r * 8 + (h / 2) * 4 + d];
      }
  FVec out_g(rows * 16), out_m(rows * 16), lse_g(2 * 4 * 5), lse_m(2 * 4 * 5);
  attention_forward(gqa, in.view(), out_g.data(), lse_g.data());
  attention_forward(mha, {in.q.data(), k_dup.data(), v_dup.data(), 16, 16}, out_m.data(),
                    lse_m.data());
  for (size_t i = 0; i < out_g.size(); ++i) CHECK(out_g[i] == Approx(out_m[i]).margin(1e-6));
  for (size_t i = 0; i < lse_g.size(); ++i) CHECK(lse_g[i] == Approx(lse_m[i]).margin(1e-6));

  const FVec dout = random_values(rng, out_g.size());
  FVec dq_g(rows * 16, 0.0f), dk_g(rows * 8, 0.0f), dv_g(rows * 8, 0.0f);
  FVec dq_m(rows * 16, 0.0f), dk_m(rows * 16, 0.0f), dv_m(rows * 16, 0.0f);
  attention_backward(gqa, in.view(), out_g.data(), lse_g.data(), dout.data(),
                     {dq_g.data(), dk_g.data(), dv_g.data(), 16, 8});
  attention_backward(mha, {in.q.data(), k_dup.data(), v_dup.data(), 16, 16}, out_m.data(),
                     lse_m.data(), dout.data(), {dq_m.data(), dk_m.data(), dv_m.data(), 16, 16});
  for (size_t i = 0; i < dq_g.size(); ++i) CHECK(dq_g[i] == Approx(dq_m[i]).margin(1e-5));
  // A shared kv head's gradient is the sum of its duplicates' gradients.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t hk = 0; hk < 2; ++hk)
      for (int64_t d = 0; d < 4; ++d) {
        const int64_t a = r * 16 + (2 * hk) * 4 + d, b = a + 4;
        CHECK(dk_g[r * 8 + hk * 4 + d] == Approx(dk_m[a] + dk_m[b]).margin(1e-5));
        CHECK(dv_g[r * 8 + hk * 4 + d] == Approx(dv_m[a] + dv_m[b]).margin(1e-5));
      }
}

TEST_CASE("attention backward accumulates: two calls on zeroed buffers give twice one call") {
  const AttentionShape s = shape(1, 4, 2, 2, 4, 0.5, false);
  std::mt19937_64 rng(49);
  const Inputs in = make_inputs(s, true, rng);
  FVec out(4 * 8), lse(2 * 4);
  attention_forward(s, in.view(), out.data(), lse.data());
  const FVec dout = random_values(rng, out.size());
  const Grads zero{FVec(in.q.size(), 0.0f), {}, {}};
  const Grads once = run_backward(in, out, lse, dout, zero);
  const Grads twice = run_backward(in, out, lse, dout, once);
  for (size_t i = 0; i < once.dq.size(); ++i) CHECK(twice.dq[i] == 2.0f * once.dq[i]);
}

TEST_CASE("attention rejects RoPE with odd head_dim and n_head not a multiple of n_kv_head") {
  FVec q(3 * 3, 0.5f), out(3 * 3), lse(3);
  const QkvView view{q.data(), q.data(), q.data(), 3, 3};
  CHECK_THROWS_AS(attention_forward(shape(1, 3, 1, 1, 3, 1.0, true), view, out.data(), lse.data()),
                  std::invalid_argument);
  CHECK_THROWS_WITH(
      attention_forward(shape(1, 3, 1, 1, 3, 1.0, true), view, out.data(), lse.data()),
      Catch::Contains("even head_dim"));
  FVec q6(3 * 6, 0.5f), out6(3 * 6), lse6(3 * 3);
  CHECK_THROWS_WITH(
      attention_forward(shape(1, 3, 3, 2, 2, 1.0, false), {q6.data(), q6.data(), q6.data(), 6, 4},
                        out6.data(), lse6.data()),
      Catch::Contains("not a multiple of n_kv_head"));
}

}  // namespace shardscope::engine::cpu::test
