// linear_forward / linear_backward against the float64 reference and central
// differences, both weight layouts, with and without bias.
#include <random>
#include <stdexcept>

#include "engine/cpu/ops.h"
#include "tests/engine/cpu/grad_check.h"
#include "tests/engine/cpu/ref_ops.h"

namespace shardscope::engine::cpu::test {
namespace {

void check_linear(WeightLayout layout, bool with_bias, uint64_t seed) {
  const int64_t n = 5, in = 7, out = 4;
  std::mt19937_64 rng(seed);
  const FVec x = random_values(rng, n * in), w = random_values(rng, in * out),
             b = with_bias ? random_values(rng, out) : FVec();
  const FVec dy = random_values(rng, n * out);
  const Vec xd = to_double(x), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);

  FVec y(n * out);
  linear_forward(x.data(), w.data(), with_bias ? b.data() : nullptr, y.data(), n, in, out, layout);
  check_close(y, linear_ref(xd, wd, bd, n, in, out, layout), kForwardTol, "y");

  // Gradient buffers start non-zero: backward must add to them.
  const FVec dx0 = random_values(rng, n * in), dw0 = random_values(rng, in * out),
             db0 = random_values(rng, out);
  FVec dx = dx0, dw = dw0, db = db0;
  linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(),
                  with_bias ? db.data() : nullptr, n, in, out, layout);

  check_close(
      dx,
      numeric_grad(
          [&](const Vec& v) { return dot(dyd, linear_ref(v, wd, bd, n, in, out, layout)); }, xd),
      kGradTol, "dx", dx0);
  check_close(
      dw,
      numeric_grad(
          [&](const Vec& v) { return dot(dyd, linear_ref(xd, v, bd, n, in, out, layout)); }, wd),
      kGradTol, "dw", dw0);
  if (with_bias) {
    check_close(
        db,
        numeric_grad(
            [&](const Vec& v) { return dot(dyd, linear_ref(xd, wd, v, n, in, out, layout)); }, bd),
        kGradTol, "dbias", db0);
  }
}

}  // namespace

TEST_CASE("linear out_in (nn.Linear) with bias matches float64 reference and central differences") {
  check_linear(WeightLayout::out_in, true, 11);
}

TEST_CASE(
    "linear out_in (nn.Linear) without bias matches float64 reference and central differences") {
  check_linear(WeightLayout::out_in, false, 12);
}

TEST_CASE("linear in_out (HF Conv1D) with bias matches float64 reference and central differences") {
  check_linear(WeightLayout::in_out, true, 13);
}

TEST_CASE(
    "linear in_out (HF Conv1D) without bias matches float64 reference and central differences") {
  check_linear(WeightLayout::in_out, false, 14);
}

TEST_CASE("linear backward accumulates: two calls on zeroed buffers give twice one call") {
  const int64_t n = 3, in = 4, out = 5;
  std::mt19937_64 rng(21);
  const FVec x = random_values(rng, n * in), w = random_values(rng, out * in),
             dy = random_values(rng, n * out);
  FVec dx1(n * in, 0.0f), dw1(out * in, 0.0f), db1(out, 0.0f);
  linear_backward(x.data(), w.data(), dy.data(), dx1.data(), dw1.data(), db1.data(), n, in, out,
                  WeightLayout::out_in);
  FVec dx2(n * in, 0.0f), dw2(out * in, 0.0f), db2(out, 0.0f);
  for (int call = 0; call < 2; ++call)
    linear_backward(x.data(), w.data(), dy.data(), dx2.data(), dw2.data(), db2.data(), n, in, out,
                    WeightLayout::out_in);
  // x + x is exact in float: doubling must be bit-exact.
  for (size_t i = 0; i < dx1.size(); ++i) CHECK(dx2[i] == 2.0f * dx1[i]);
  for (size_t i = 0; i < dw1.size(); ++i) CHECK(dw2[i] == 2.0f * dw1[i]);
  for (size_t i = 0; i < db1.size(); ++i) CHECK(db2[i] == 2.0f * db1[i]);
}

TEST_CASE("linear with dx == nullptr still produces dw equal to the dx-requesting call") {
  const int64_t n = 4, in = 3, out = 2;
  std::mt19937_64 rng(22);
  const FVec x = random_values(rng, n * in), w = random_values(rng, in * out),
             dy = random_values(rng, n * out);
  FVec dx(n * in, 0.0f), dw_a(in * out, 0.0f), dw_b(in * out, 0.0f);
  linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw_a.data(), nullptr, n, in, out,
                  WeightLayout::in_out);
  linear_backward(x.data(), w.data(), dy.data(), nullptr, dw_b.data(), nullptr, n, in, out,
                  WeightLayout::in_out);
  CHECK(dw_a == dw_b);
  CHECK(std::any_of(dw_a.begin(), dw_a.end(), [](float v) { return v != 0.0f; }));
}

TEST_CASE("linear rejects a negative size and a null weight with invalid_argument") {
  FVec x(6, 1.0f), w(6, 1.0f), y(4, 0.0f);
  CHECK_THROWS_AS(
      linear_forward(x.data(), w.data(), nullptr, y.data(), -1, 3, 2, WeightLayout::out_in),
      std::invalid_argument);
  CHECK_THROWS_WITH(
      linear_forward(x.data(), nullptr, nullptr, y.data(), 2, 3, 2, WeightLayout::out_in),
      Catch::Contains("w is null"));
}

}  // namespace shardscope::engine::cpu::test
