// The CPU ops of the Gemma, Gemma 2, Phi-3 and Qwen3 graphs beyond Llama's:
// gated MLPs with GELU gates and Phi-3's packed gate_up rows, the constant
// scale, soft-capping and Gemma's RMSNorm (1 + weight), against float64
// references, central differences and closed forms.
#include <cmath>
#include <random>
#include <stdexcept>

#include "engine/cpu/ops.h"
#include "tests/engine/cpu/grad_check.h"
#include "tests/engine/cpu/ref_ops.h"

namespace shardscope::engine::cpu::test {
namespace {

double act_ref(double g, GateActivation act) {
  switch (act) {
    case GateActivation::silu:
      return silu_ref(g);
    case GateActivation::gelu:
      return gelu_erf_ref(g);
    case GateActivation::gelu_tanh:
      return gelu_tanh_ref(g);
  }
  return 0.0;
}

// act(gate) * up over a packed [rows, 2*width] buffer (gate then up per row).
Vec packed_ref(const Vec& gu, int64_t rows, int64_t width, GateActivation act) {
  Vec y(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < width; ++i)
      y[r * width + i] = act_ref(gu[r * 2 * width + i], act) * gu[r * 2 * width + width + i];
  return y;
}

void check_packed(GateActivation act, uint64_t seed) {
  const int64_t rows = 3, width = 5;
  std::mt19937_64 rng(seed);
  const FVec gu = random_values(rng, rows * 2 * width, 0.05, 3.0),
             dy = random_values(rng, rows * width);
  const Vec gud = to_double(gu), dyd = to_double(dy);
  FVec y(rows * width);
  gated_forward(gu.data(), gu.data() + width, y.data(), rows, width, 2 * width, act);
  check_close(y, packed_ref(gud, rows, width, act), kForwardTol, "y");
  const FVec d0 = random_values(rng, gu.size());
  FVec d = d0;
  gated_backward(gu.data(), gu.data() + width, dy.data(), d.data(), d.data() + width, rows, width,
                 2 * width, act);
  check_close(
      d, numeric_grad([&](const Vec& v) { return dot(dyd, packed_ref(v, rows, width, act)); }, gud),
      kGradTol, "d(gate_up)", d0);
}

}  // namespace

TEST_CASE("gated MLP over packed gate_up rows (Phi-3): silu, gelu, gelu_tanh vs reference") {
  check_packed(GateActivation::silu, 71);
  check_packed(GateActivation::gelu, 72);
  check_packed(GateActivation::gelu_tanh, 73);
}

TEST_CASE("gated silu on separate tensors equals swiglu_forward/backward bit for bit") {
  std::mt19937_64 rng(74);
  const int64_t n = 40;
  const FVec gate = random_values(rng, n, 0.01, 4.0), up = random_values(rng, n),
             dy = random_values(rng, n);
  FVec y1(n), y2(n), dg1(n, 0.0f), du1(n, 0.0f), dg2(n, 0.0f), du2(n, 0.0f);
  swiglu_forward(gate.data(), up.data(), y1.data(), n);
  gated_forward(gate.data(), up.data(), y2.data(), 1, n, n, GateActivation::silu);
  CHECK(y1 == y2);
  swiglu_backward(gate.data(), up.data(), dy.data(), dg1.data(), du1.data(), n);
  gated_backward(gate.data(), up.data(), dy.data(), dg2.data(), du2.data(), 1, n, n,
                 GateActivation::silu);
  CHECK(dg1 == dg2);
  CHECK(du1 == du2);
}

TEST_CASE("gated gelu_tanh at gate 1, up 2: 2 * gelu_tanh(1) = 1.6823 (closed form)") {
  const float gate = 1.0f, up = 2.0f;
  float y = 0.0f;
  gated_forward(&gate, &up, &y, 1, 1, 1, GateActivation::gelu_tanh);
  CHECK(y == Approx(2.0 * 0.8411919906082768).epsilon(1e-6));
  CHECK_THROWS_AS(gated_forward(&gate, &up, &y, 1, 2, 1, GateActivation::silu),
                  std::invalid_argument);  // stride < width
}

TEST_CASE("scale: y = x * s, dx += dy * s") {
  const FVec x = {1.0f, -2.0f, 0.5f}, dy = {1.0f, 1.0f, -4.0f};
  FVec y(3), dx = {1.0f, 0.0f, 0.0f};
  scale_forward(x.data(), y.data(), 3, 45.25f);  // bf16's sqrt(2048)
  CHECK(y == FVec{45.25f, -90.5f, 22.625f});
  scale_backward(dy.data(), dx.data(), 3, 45.25f);
  CHECK(dx == FVec{46.25f, 45.25f, -181.0f});
}

TEST_CASE("softcap: cap * tanh(x / cap) forward, backward matches central differences") {
  std::mt19937_64 rng(75);
  const int64_t n = 32;
  const float cap = 3.0f;
  const FVec x = random_values(rng, n, 0.1, 9.0), dy = random_values(rng, n);
  const Vec xd = to_double(x), dyd = to_double(dy);
  auto ref = [&](const Vec& v) {
    Vec y(v.size());
    for (size_t i = 0; i < v.size(); ++i) y[i] = cap * std::tanh(v[i] / cap);
    return y;
  };
  FVec y(n), th(n);
  softcap_forward(x.data(), y.data(), th.data(), n, cap);
  check_close(y, ref(xd), kForwardTol, "y");
  for (int64_t i = 0; i < n; ++i) CHECK(std::abs(y[i]) < cap);  // |y| < cap always
  const FVec dx0 = random_values(rng, n);
  FVec dx = dx0;
  softcap_backward(th.data(), dy.data(), dx.data(), n);
  check_close(dx, numeric_grad([&](const Vec& v) { return dot(dyd, ref(v)); }, xd), kGradTol, "dx",
              dx0);
  CHECK_THROWS_AS(softcap_forward(x.data(), y.data(), th.data(), n, 0.0f), std::invalid_argument);
}

TEST_CASE("rmsnorm weight_offset 1 (Gemma) equals plain rmsnorm with weight 1 + w") {
  const int64_t n = 4, c = 8;  // also one row per head: n = B*T*H rows of head_dim
  std::mt19937_64 rng(76);
  const FVec x = random_values(rng, n * c, 0.1, 2.0), w = random_values(rng, c),
             dy = random_values(rng, n * c);
  FVec w1(w);
  for (float& v : w1) v += 1.0f;
  FVec y(n * c), r(n), y1(n * c), r1(n);
  rmsnorm_forward(x.data(), w.data(), y.data(), r.data(), n, c, 1e-6, 1.0);
  rmsnorm_forward(x.data(), w1.data(), y1.data(), r1.data(), n, c, 1e-6);
  CHECK(y == y1);
  CHECK(r == r1);
  FVec dx(n * c, 0.0f), dw(c, 0.0f), dx1(n * c, 0.0f), dw1(c, 0.0f);
  rmsnorm_backward(x.data(), w.data(), r.data(), dy.data(), dx.data(), dw.data(), n, c, 1.0);
  rmsnorm_backward(x.data(), w1.data(), r1.data(), dy.data(), dx1.data(), dw1.data(), n, c);
  CHECK(dx == dx1);
  CHECK(dw == dw1);  // d/dw (1 + w) = 1
  // Weight 0 (HF's init) is the unit scale: y = x * rstd.
  const FVec zero(c, 0.0f);
  rmsnorm_forward(x.data(), zero.data(), y.data(), r.data(), n, c, 1e-6, 1.0);
  for (int64_t i = 0; i < n * c; ++i) CHECK(y[i] == x[i] * r[i / c]);
}

}  // namespace shardscope::engine::cpu::test
