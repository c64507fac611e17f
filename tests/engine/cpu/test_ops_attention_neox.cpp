// GPT-NeoX attention: the packed query_key_value output laid out per head
// [B, T, H, 3, D] (head_stride 3*D) and partial rotary (only the first
// rotary_dim elements of each head rotate), against the float64 reference
// and central differences; a per-head layout equals the same values laid out
// [3, H, D] exactly, and rotary_dim = head_dim equals full RoPE exactly.
#include <cmath>
#include <random>
#include <stdexcept>

#include "engine/cpu/ops.h"
#include "tests/engine/cpu/grad_check.h"
#include "tests/engine/cpu/ref_ops.h"

namespace shardscope::engine::cpu::test {
namespace {

AttentionShape neox_shape(int64_t b, int64_t t, int64_t h, int64_t d, int64_t rotary_dim,
                          double theta) {
  AttentionShape s;
  s.batch = b;
  s.seq = t;
  s.n_head = h;
  s.n_kv_head = h;
  s.head_dim = d;
  s.scale = 1.0 / std::sqrt(static_cast<double>(d));
  s.rope = true;
  s.rope_theta = theta;
  s.rotary_dim = rotary_dim;
  return s;
}

// Views of one packed buffer [B, T, 3*H*D] in the per-head (NeoX) layout.
QkvView per_head(const AttentionShape& s, const float* base) {
  const int64_t D = s.head_dim, row = 3 * s.n_head * D;
  return {base, base + D, base + 2 * D, row, row, 3 * D};
}
QkvGrad per_head_grad(const AttentionShape& s, float* base) {
  const int64_t D = s.head_dim, row = 3 * s.n_head * D;
  return {base, base + D, base + 2 * D, row, row, 3 * D};
}

AttentionRef reference(const AttentionShape& s, const Vec& qkv) {
  const int64_t D = s.head_dim, row = 3 * s.n_head * D;
  return attention_ref(s, qkv.data(), qkv.data() + D, qkv.data() + 2 * D, row, row, 3 * D);
}

void check_neox(const AttentionShape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t rows = s.batch * s.seq, hd = s.n_head * s.head_dim;
  const FVec qkv = random_values(rng, static_cast<size_t>(rows * 3 * hd), 0.1, 2.0);
  const Vec qkvd = to_double(qkv);
  FVec out(static_cast<size_t>(rows * hd)), lse(static_cast<size_t>(rows * s.n_head));
  attention_forward(s, per_head(s, qkv.data()), out.data(), lse.data());
  const AttentionRef ref = reference(s, qkvd);
  check_close(out, ref.out, kForwardTol, "out");
  check_close(lse, ref.lse, kForwardTol, "lse");

  const FVec dout = random_values(rng, out.size());
  const Vec doutd = to_double(dout);
  const FVec g0 = random_values(rng, qkv.size());
  FVec g = g0;
  attention_backward(s, per_head(s, qkv.data()), out.data(), lse.data(), dout.data(),
                     per_head_grad(s, g.data()));
  check_close(g, numeric_grad([&](const Vec& x) { return dot(doutd, reference(s, x).out); }, qkvd),
              kGradTol, "d(per-head qkv)", g0);
}

}  // namespace

TEST_CASE("attention per-head qkv layout with partial rotary (R = D/4, Pythia) matches reference") {
  // D = 8, R = 2: one rotating pair per head; theta 100 turns it clearly.
  check_neox(neox_shape(2, 5, 3, 8, 2, 100.0), 61);
}

TEST_CASE("attention per-head qkv layout with partial rotary R = D/2 and theta 10000 matches") {
  check_neox(neox_shape(1, 6, 2, 8, 4, 10000.0), 62);
}

TEST_CASE("attention per-head layout equals the [3, H, D] layout of the same values exactly") {
  const AttentionShape s = neox_shape(2, 5, 3, 4, 2, 100.0);
  const int64_t D = 4, H = 3, rows = 10, hd = H * D;
  std::mt19937_64 rng(63);
  const FVec heads = random_values(rng, static_cast<size_t>(rows * 3 * hd), 0.1, 2.0);
  FVec split(heads.size());  // [rows, 3, H, D]: q of every head, then k, then v
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t d = 0; d < D; ++d)
          split[r * 3 * hd + j * hd + h * D + d] = heads[r * 3 * hd + h * 3 * D + j * D + d];
  FVec out_a(rows * hd), out_b(rows * hd), lse_a(rows * H), lse_b(rows * H);
  attention_forward(s, per_head(s, heads.data()), out_a.data(), lse_a.data());
  const QkvView packed{split.data(), split.data() + hd, split.data() + 2 * hd, 3 * hd, 3 * hd};
  attention_forward(s, packed, out_b.data(), lse_b.data());
  CHECK(out_a == out_b);
  CHECK(lse_a == lse_b);
  const FVec dout = random_values(rng, out_a.size());
  FVec g_a(heads.size(), 0.0f), g_b(heads.size(), 0.0f);
  attention_backward(s, per_head(s, heads.data()), out_a.data(), lse_a.data(), dout.data(),
                     per_head_grad(s, g_a.data()));
  attention_backward(s, packed, out_b.data(), lse_b.data(), dout.data(),
                     {g_b.data(), g_b.data() + hd, g_b.data() + 2 * hd, 3 * hd, 3 * hd});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t d = 0; d < D; ++d)
          CHECK(g_a[r * 3 * hd + h * 3 * D + j * D + d] == g_b[r * 3 * hd + j * hd + h * D + d]);
}

TEST_CASE(
    "attention rotary_dim = head_dim equals full RoPE exactly, elements past R do not rotate") {
  AttentionShape full = neox_shape(1, 4, 2, 4, 0, 100.0);
  AttentionShape same = full;
  same.rotary_dim = 4;
  std::mt19937_64 rng(64);
  const FVec qkv = random_values(rng, 4 * 3 * 8, 0.1, 2.0);
  FVec out_a(4 * 8), out_b(4 * 8), lse_a(2 * 4), lse_b(2 * 4);
  attention_forward(full, per_head(full, qkv.data()), out_a.data(), lse_a.data());
  attention_forward(same, per_head(same, qkv.data()), out_b.data(), lse_b.data());
  CHECK(out_a == out_b);
  CHECK(lse_a == lse_b);
  // R = 2 of D = 4: elements 2 and 3 do not rotate. With q = k = e_2 every
  // score is scale * 1 = 0.5 at every position, so lse = 0.5 + log(t + 1)
  // and the output is the mean of v over the prefix, (t + 2) / 2.
  AttentionShape partial = neox_shape(1, 3, 1, 4, 2, 10000.0);
  FVec unit(3 * 12, 0.0f);
  for (int64_t t = 0; t < 3; ++t) {
    unit[t * 12 + 2] = 1.0f;                                                           // q = e_2
    unit[t * 12 + 4 + 2] = 1.0f;                                                       // k = e_2
    for (int64_t d = 0; d < 4; ++d) unit[t * 12 + 8 + d] = static_cast<float>(t + 1);  // v
  }
  FVec out(3 * 4), lse(3);
  attention_forward(partial, per_head(partial, unit.data()), out.data(), lse.data());
  for (int64_t t = 0; t < 3; ++t) {
    CHECK(lse[t] == Approx(0.5 + std::log(static_cast<double>(t + 1))).margin(1e-6));
    for (int64_t d = 0; d < 4; ++d) CHECK(out[t * 4 + d] == Approx((t + 2) / 2.0).margin(1e-6));
  }
}

TEST_CASE("attention rejects an odd or too large rotary_dim and a head_stride below head_dim") {
  const FVec qkv(2 * 3 * 8, 0.5f);
  FVec out(2 * 8), lse(2 * 2);
  AttentionShape s = neox_shape(1, 2, 2, 4, 3, 10000.0);
  CHECK_THROWS_WITH(attention_forward(s, per_head(s, qkv.data()), out.data(), lse.data()),
                    Catch::Contains("rope needs an even rotary_dim, got 3"));
  s.rotary_dim = 6;
  CHECK_THROWS_WITH(attention_forward(s, per_head(s, qkv.data()), out.data(), lse.data()),
                    Catch::Contains("rotary_dim 6 is not in [0, head_dim 4]"));
  s.rotary_dim = 2;
  const QkvView narrow{qkv.data(), qkv.data() + 4, qkv.data() + 8, 24, 24, 3};
  CHECK_THROWS_AS(attention_forward(s, narrow, out.data(), lse.data()), std::invalid_argument);
}

}  // namespace shardscope::engine::cpu::test
