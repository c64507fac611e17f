// GELU (tanh and erf), ReLU, SwiGLU and residual add against float64
// references, central differences and known values.
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

#include "engine/cpu/ops.h"
#include "tests/engine/cpu/grad_check.h"
#include "tests/engine/cpu/ref_ops.h"

namespace shardscope::engine::cpu::test {
namespace {

Vec map(const Vec& x, double (*f)(double)) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = f(x[i]);
  return y;
}

void check_gelu(bool tanh_form, uint64_t seed) {
  double (*ref)(double) = tanh_form ? gelu_tanh_ref : gelu_erf_ref;
  std::mt19937_64 rng(seed);
  const FVec x = random_values(rng, 64, 0.01, 4.0), dy = random_values(rng, 64);
  const Vec xd = to_double(x), dyd = to_double(dy);
  FVec y(x.size());
  gelu_forward(x.data(), y.data(), 64, tanh_form);
  check_close(y, map(xd, ref), kForwardTol, "y");
  const FVec dx0 = random_values(rng, 64);
  FVec dx = dx0;
  gelu_backward(x.data(), dy.data(), dx.data(), 64, tanh_form);
  check_close(dx, numeric_grad([&](const Vec& v) { return dot(dyd, map(v, ref)); }, xd), kGradTol,
              "dx", dx0);
}

}  // namespace

TEST_CASE("gelu tanh form: known values, forward reference and backward central differences") {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) at 1, -1, 2.
  const FVec x = {1.0f, -1.0f, 2.0f};
  FVec y(3);
  gelu_forward(x.data(), y.data(), 3, true);
  CHECK(y[0] == Approx(0.8411919906082768).epsilon(1e-6));
  CHECK(y[1] == Approx(-0.15880800939172324).epsilon(1e-6));
  CHECK(y[2] == Approx(1.954597694087775).epsilon(1e-6));
  check_gelu(true, 51);
}

TEST_CASE("gelu exact erf form: known values, forward reference and backward central differences") {
  // 0.5 x (1 + erf(x / sqrt 2)) at 1, -1, 2: differs from the tanh form in the 4th digit.
  const FVec x = {1.0f, -1.0f, 2.0f};
  FVec y(3);
  gelu_forward(x.data(), y.data(), 3, false);
  CHECK(y[0] == Approx(0.8413447460685429).epsilon(1e-6));
  CHECK(y[1] == Approx(-0.15865525393145707).epsilon(1e-6));
  CHECK(y[2] == Approx(1.9544997361036416).epsilon(1e-6));
  check_gelu(false, 52);
}

TEST_CASE("relu: max(x, 0) forward, backward passes dy where the output is positive, NaN kept") {
  std::mt19937_64 rng(53);
  const FVec x = random_values(rng, 40), dy = random_values(rng, 40);
  const Vec xd = to_double(x), dyd = to_double(dy);
  FVec y(40);
  relu_forward(x.data(), y.data(), 40);
  auto relu = [](double v) { return v > 0.0 ? v : 0.0; };
  Vec ref(40);
  for (size_t i = 0; i < 40; ++i) ref[i] = relu(xd[i]);
  check_close(y, ref, 0.0, "y");  // exact
  const FVec dx0 = random_values(rng, 40);
  FVec dx = dx0;
  relu_backward(y.data(), dy.data(), dx.data(), 40);
  check_close(dx,
              numeric_grad(
                  [&](const Vec& v) {
                    double s = 0.0;
                    for (size_t i = 0; i < v.size(); ++i) s += dyd[i] * relu(v[i]);
                    return s;
                  },
                  xd),
              kGradTol, "dx", dx0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float out = 0.0f;
  relu_forward(&nan, &out, 1);
  CHECK(std::isnan(out));
}

TEST_CASE("swiglu: silu(gate) * up forward, backward matches central differences") {
  std::mt19937_64 rng(54);
  const int64_t n = 48;
  const FVec gate = random_values(rng, n, 0.05, 5.0), up = random_values(rng, n),
             dy = random_values(rng, n);
  const Vec gd = to_double(gate), ud = to_double(up), dyd = to_double(dy);
  auto ref = [&](const Vec& g, const Vec& u) {
    Vec y(g.size());
    for (size_t i = 0; i < g.size(); ++i) y[i] = silu_ref(g[i]) * u[i];
    return y;
  };
  FVec y(n);
  swiglu_forward(gate.data(), up.data(), y.data(), n);
  check_close(y, ref(gd, ud), kForwardTol, "y");
  const FVec minus_two = {-2.0f}, three = {3.0f};
  float single = 0.0f;
  swiglu_forward(minus_two.data(), three.data(), &single, 1);
  CHECK(single == Approx(3.0 * -0.2384058440442351).epsilon(1e-6));  // silu(-2) * 3

  const FVec dg0 = random_values(rng, n), du0 = random_values(rng, n);
  FVec dg = dg0, du = du0;
  swiglu_backward(gate.data(), up.data(), dy.data(), dg.data(), du.data(), n);
  check_close(dg, numeric_grad([&](const Vec& v) { return dot(dyd, ref(v, ud)); }, gd), kGradTol,
              "dgate", dg0);
  check_close(du, numeric_grad([&](const Vec& v) { return dot(dyd, ref(gd, v)); }, ud), kGradTol,
              "dup", du0);
}

TEST_CASE("residual plain add: y = a + b, backward adds dy to both") {
  std::mt19937_64 rng(55);
  const int64_t n = 12;
  const FVec a = random_values(rng, n), b = random_values(rng, n), dy = random_values(rng, n);
  FVec y(n);
  residual_forward(a.data(), b.data(), y.data(), n, n);
  for (int64_t i = 0; i < n; ++i) CHECK(y[i] == a[i] + b[i]);
  const FVec da0 = random_values(rng, n), db0 = random_values(rng, n);
  FVec da = da0, db = db0;
  residual_backward(dy.data(), da.data(), db.data(), n, n);
  const Vec dyd = to_double(dy);
  const Vec ad = to_double(a), bd = to_double(b);
  auto ref = [&](const Vec& x, const Vec& z) {
    Vec out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] + z[i];
    return out;
  };
  check_close(da, numeric_grad([&](const Vec& v) { return dot(dyd, ref(v, bd)); }, ad), kGradTol,
              "da", da0);
  check_close(db, numeric_grad([&](const Vec& v) { return dot(dyd, ref(ad, v)); }, bd), kGradTol,
              "db", db0);
}

TEST_CASE("residual broadcast (wte + wpe over B=3 rows): db sums dy over the rows") {
  std::mt19937_64 rng(56);
  const int64_t rows = 3, b_n = 8, n = rows * b_n;
  const FVec a = random_values(rng, n), b = random_values(rng, b_n), dy = random_values(rng, n);
  const Vec ad = to_double(a), bd = to_double(b), dyd = to_double(dy);
  auto ref = [&](const Vec& x, const Vec& z) {
    Vec out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] + z[i % b_n];
    return out;
  };
  FVec y(n);
  residual_forward(a.data(), b.data(), y.data(), n, b_n);
  check_close(y, ref(ad, bd), kForwardTol, "y");
  const FVec da0 = random_values(rng, n), db0 = random_values(rng, b_n);
  FVec da = da0, db = db0;
  residual_backward(dy.data(), da.data(), db.data(), n, b_n);
  check_close(da, numeric_grad([&](const Vec& v) { return dot(dyd, ref(v, bd)); }, ad), kGradTol,
              "da", da0);
  check_close(db, numeric_grad([&](const Vec& v) { return dot(dyd, ref(ad, v)); }, bd), kGradTol,
              "db", db0);
  CHECK_THROWS_AS(residual_forward(a.data(), b.data(), y.data(), n, 5), std::invalid_argument);
}

TEST_CASE("pointwise backwards accumulate: two calls on zeroed buffers give twice one call") {
  std::mt19937_64 rng(57);
  const int64_t n = 16;
  const FVec x = random_values(rng, n), u = random_values(rng, n), dy = random_values(rng, n);
  FVec once(n, 0.0f), twice(n, 0.0f), up_once(n, 0.0f), up_twice(n, 0.0f);
  gelu_backward(x.data(), dy.data(), once.data(), n, true);
  for (int call = 0; call < 2; ++call) gelu_backward(x.data(), dy.data(), twice.data(), n, true);
  for (int64_t i = 0; i < n; ++i) CHECK(twice[i] == 2.0f * once[i]);
  std::fill(once.begin(), once.end(), 0.0f);
  std::fill(twice.begin(), twice.end(), 0.0f);
  swiglu_backward(x.data(), u.data(), dy.data(), once.data(), up_once.data(), n);
  for (int call = 0; call < 2; ++call)
    swiglu_backward(x.data(), u.data(), dy.data(), twice.data(), up_twice.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    CHECK(twice[i] == 2.0f * once[i]);
    CHECK(up_twice[i] == 2.0f * up_once[i]);
  }
}

}  // namespace shardscope::engine::cpu::test
