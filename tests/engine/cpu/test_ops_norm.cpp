// LayerNorm and RMSNorm against the float64 reference and central differences.
#include <random>

#include "engine/cpu/ops.h"
#include "tests/engine/cpu/grad_check.h"
#include "tests/engine/cpu/ref_ops.h"

namespace shardscope::engine::cpu::test {

TEST_CASE("layernorm forward (y, mean, rstd) and backward (dx, dw, db) match float64 reference") {
  const int64_t n = 4, c = 6;
  const double eps = 1e-5;
  std::mt19937_64 rng(31);
  const FVec x = random_values(rng, n * c, 0.1, 2.0), w = random_values(rng, c),
             b = random_values(rng, c), dy = random_values(rng, n * c);
  const Vec xd = to_double(x), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);

  FVec y(n * c), mean(n), rstd(n);
  layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), n, c, eps);
  const NormRef ref = layernorm_ref(xd, wd, bd, n, c, eps);
  check_close(y, ref.y, kForwardTol, "y");
  check_close(mean, ref.mean, kForwardTol, "mean");
  check_close(rstd, ref.rstd, kForwardTol, "rstd");

  const FVec dx0 = random_values(rng, n * c), dw0 = random_values(rng, c),
             db0 = random_values(rng, c);
  FVec dx = dx0, dw = dw0, db = db0;
  layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), dx.data(), dw.data(),
                     db.data(), n, c);
  check_close(
      dx,
      numeric_grad([&](const Vec& v) { return dot(dyd, layernorm_ref(v, wd, bd, n, c, eps).y); },
                   xd),
      kGradTol, "dx", dx0);
  check_close(
      dw,
      numeric_grad([&](const Vec& v) { return dot(dyd, layernorm_ref(xd, v, bd, n, c, eps).y); },
                   wd),
      kGradTol, "dw", dw0);
  check_close(
      db,
      numeric_grad([&](const Vec& v) { return dot(dyd, layernorm_ref(xd, wd, v, n, c, eps).y); },
                   bd),
      kGradTol, "db", db0);
}

TEST_CASE("layernorm of rows with mean 1000 and unit spread keeps precision (two-pass variance)") {
  // A one-pass float E[x^2] - E[x]^2 loses ~6 of the 7 digits here (1e6 - 1e6).
  const int64_t n = 2, c = 64;
  std::mt19937_64 rng(32);
  FVec x = random_values(rng, n * c);
  for (float& v : x) v += 1000.0f;
  const FVec w(c, 1.0f), b(c, 0.0f);
  FVec y(n * c), mean(n), rstd(n);
  layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), n, c, 1e-5);
  const NormRef ref = layernorm_ref(to_double(x), to_double(w), to_double(b), n, c, 1e-5);
  check_close(y, ref.y, 1e-4, "y");
  check_close(rstd, ref.rstd, kForwardTol, "rstd");
}

TEST_CASE("layernorm backward accumulates: two calls on zeroed buffers give twice one call") {
  const int64_t n = 3, c = 5;
  std::mt19937_64 rng(33);
  const FVec x = random_values(rng, n * c), w = random_values(rng, c), b = random_values(rng, c),
             dy = random_values(rng, n * c);
  FVec y(n * c), mean(n), rstd(n);
  layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), n, c, 1e-5);
  FVec dx1(n * c, 0.0f), dw1(c, 0.0f), db1(c, 0.0f), dx2 = dx1, dw2 = dw1, db2 = db1;
  layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), dx1.data(),
                     dw1.data(), db1.data(), n, c);
  for (int call = 0; call < 2; ++call)
    layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), dx2.data(),
                       dw2.data(), db2.data(), n, c);
  for (size_t i = 0; i < dx1.size(); ++i) CHECK(dx2[i] == 2.0f * dx1[i]);
  for (size_t i = 0; i < dw1.size(); ++i) CHECK(dw2[i] == 2.0f * dw1[i]);
  for (size_t i = 0; i < db1.size(); ++i) CHECK(db2[i] == 2.0f * db1[i]);
}

TEST_CASE("rmsnorm forward (y, rstd) and backward (dx, dw) match float64 reference") {
  const int64_t n = 3, c = 8;
  const double eps = 1e-6;
  std::mt19937_64 rng(34);
  const FVec x = random_values(rng, n * c, 0.1, 2.0), w = random_values(rng, c),
             dy = random_values(rng, n * c);
  const Vec xd = to_double(x), wd = to_double(w), dyd = to_double(dy);

  FVec y(n * c), rstd(n);
  rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), n, c, eps);
  const NormRef ref = rmsnorm_ref(xd, wd, n, c, eps);
  check_close(y, ref.y, kForwardTol, "y");
  check_close(rstd, ref.rstd, kForwardTol, "rstd");

  const FVec dx0 = random_values(rng, n * c), dw0 = random_values(rng, c);
  FVec dx = dx0, dw = dw0;
  rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dw.data(), n, c);
  check_close(
      dx, numeric_grad([&](const Vec& v) { return dot(dyd, rmsnorm_ref(v, wd, n, c, eps).y); }, xd),
      kGradTol, "dx", dx0);
  check_close(
      dw, numeric_grad([&](const Vec& v) { return dot(dyd, rmsnorm_ref(xd, v, n, c, eps).y); }, wd),
      kGradTol, "dw", dw0);
}

TEST_CASE("rmsnorm of a constant row c is sign(c) * w (closed form, eps negligible)") {
  const int64_t c = 4;
  const FVec x = {-3.0f, -3.0f, -3.0f, -3.0f}, w = {0.5f, 1.0f, 2.0f, -1.0f};
  FVec y(c), rstd(1);
  rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), 1, c, 0.0);
  CHECK(rstd[0] == Approx(1.0 / 3.0).epsilon(1e-7));
  for (int64_t i = 0; i < c; ++i) CHECK(y[i] == Approx(-w[i]).epsilon(1e-6));
}

}  // namespace shardscope::engine::cpu::test
