// AdamW and SGD against values computed by hand (closed forms for step 1 and
// PyTorch's update rules evaluated in float64 for steps 2-3), and the numerics
// helpers of the optimizer step.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "engine/cpu/optim.h"
#include "tests/engine/cpu/grad_check.h"

namespace shardscope::engine::cpu::test {
namespace {

const FVec kP0 = {1.0f, -2.0f, 0.5f};
const std::vector<FVec> kGrads = {{0.5f, -0.25f, 2.0f}, {-0.1f, 0.3f, 1.0f}, {0.2f, 0.2f, -0.5f}};
// Float32 results against float64 hand values: a few float ulps per step.
constexpr double kOptimTol = 2e-6;

}  // namespace

TEST_CASE("adamw first step moves each element by lr*sign(g) after the decay p *= 1 - lr*wd") {
  // Step 1: m_hat = g, v_hat = g^2, so the update is lr * g / (|g| + eps).
  AdamWParams h;
  h.lr = 0.1;
  h.weight_decay = 0.01;
  FVec p = kP0, m(3, 0.0f), v(3, 0.0f);
  adamw_step(p.data(), kGrads[0].data(), m.data(), v.data(), 3, h, 1);
  for (size_t i = 0; i < 3; ++i) {
    const double sign = kGrads[0][i] > 0 ? 1.0 : -1.0;
    CHECK(p[i] == Approx(kP0[i] * (1.0 - 0.1 * 0.01) - 0.1 * sign).margin(kOptimTol));
    CHECK(m[i] == Approx(0.1 * kGrads[0][i]).margin(1e-8));
    CHECK(v[i] == Approx(0.001 * kGrads[0][i] * kGrads[0][i]).margin(1e-10));
  }
}

TEST_CASE("adamw three steps (lr 0.1, betas 0.9/0.999, eps 1e-8, wd 0.01) match hand values") {
  AdamWParams h;
  h.lr = 0.1;
  h.weight_decay = 0.01;
  // p after steps 1, 2, 3 (PyTorch's AdamW evaluated in float64).
  const std::vector<Vec> want = {{0.899000002, -1.8980000039999998, 0.3995000005},
                                 {0.8469983956973238, -1.910396476543747, 0.30588253720801045},
                                 {0.7860354044446134, -1.9474556083139274, 0.24921051744273068}};
  const Vec want_m3 = {0.0515, 0.02675, 0.202};
  const Vec want_v3 = {0.00029949025, 0.0001922850625, 0.005241004};
  FVec p = kP0, m(3, 0.0f), v(3, 0.0f);
  for (int64_t step = 1; step <= 3; ++step) {
    adamw_step(p.data(), kGrads[step - 1].data(), m.data(), v.data(), 3, h, step);
    INFO("step " << step);
    for (size_t i = 0; i < 3; ++i) CHECK(p[i] == Approx(want[step - 1][i]).margin(kOptimTol));
  }
  for (size_t i = 0; i < 3; ++i) {
    CHECK(m[i] == Approx(want_m3[i]).epsilon(1e-6));
    CHECK(v[i] == Approx(want_v3[i]).epsilon(1e-6));
  }
}

TEST_CASE("adamw rejects step 0 and beta1 = 1 with invalid_argument") {
  FVec p = kP0, m(3, 0.0f), v(3, 0.0f);
  CHECK_THROWS_AS(adamw_step(p.data(), kGrads[0].data(), m.data(), v.data(), 3, {}, 0),
                  std::invalid_argument);
  AdamWParams h;
  h.beta1 = 1.0;
  CHECK_THROWS_WITH(adamw_step(p.data(), kGrads[0].data(), m.data(), v.data(), 3, h, 1),
                    Catch::Contains("beta1"));
}

TEST_CASE("sgd without momentum, weight decay 0.1: p -= lr (g + wd p) for three steps") {
  SgdParams h;
  h.lr = 0.1;
  h.weight_decay = 0.1;
  const std::vector<Vec> want = {
      {0.94, -1.955, 0.295}, {0.9406, -1.96545, 0.19205}, {0.911194, -1.9657955, 0.2401295}};
  FVec p = kP0;
  for (int64_t step = 1; step <= 3; ++step) {
    sgd_step(p.data(), kGrads[step - 1].data(), nullptr, 3, h, step);
    INFO("step " << step);
    for (size_t i = 0; i < 3; ++i) CHECK(p[i] == Approx(want[step - 1][i]).margin(kOptimTol));
  }
}

TEST_CASE("sgd momentum 0.9: buf = g on step 1, then 0.9 buf + g, and p -= lr buf") {
  SgdParams h;
  h.lr = 0.1;
  h.momentum = 0.9;
  const std::vector<Vec> want_p = {
      {0.95, -1.975, 0.3}, {0.915, -1.9825, 0.02}, {0.8635, -2.00925, -0.182}};
  const std::vector<Vec> want_buf = {{0.5, -0.25, 2.0}, {0.35, 0.075, 2.8}, {0.515, 0.2675, 2.02}};
  // The buffer's previous contents must not matter on step 1 (torch clones g).
  FVec p = kP0, buf = {7.0f, -7.0f, 7.0f};
  for (int64_t step = 1; step <= 3; ++step) {
    sgd_step(p.data(), kGrads[step - 1].data(), buf.data(), 3, h, step);
    INFO("step " << step);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(p[i] == Approx(want_p[step - 1][i]).margin(kOptimTol));
      CHECK(buf[i] == Approx(want_buf[step - 1][i]).margin(kOptimTol));
    }
  }
  CHECK_THROWS_AS(sgd_step(p.data(), kGrads[0].data(), nullptr, 3, h, 2), std::invalid_argument);
}

TEST_CASE("squared_norm sums squares in double: 1e8 plus 1e4 ones is exact") {
  const FVec small = {3.0f, -4.0f};
  CHECK(squared_norm(small.data(), 2) == 25.0);
  // float accumulation would stall at 1e8 (its ulp there is 8); double keeps every 1.
  FVec x(10001, 1.0f);
  x[0] = 1e4f;
  CHECK(squared_norm(x.data(), static_cast<int64_t>(x.size())) == 1e8 + 1e4);
  CHECK(squared_norm(x.data(), 0) == 0.0);
}

TEST_CASE("has_inf_or_nan finds +inf, -inf and NaN anywhere, not large finite values") {
  FVec x(37, 1.5f);
  x[5] = std::numeric_limits<float>::max();
  x[6] = -std::numeric_limits<float>::max();
  x[7] = std::numeric_limits<float>::denorm_min();
  CHECK_FALSE(has_inf_or_nan(x.data(), 37));
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    for (size_t at : {size_t{0}, size_t{20}, size_t{36}}) {
      FVec y = x;
      y[at] = bad;
      INFO("value " << bad << " at " << at);
      CHECK(has_inf_or_nan(y.data(), 37));
      CHECK_FALSE(has_inf_or_nan(y.data(), static_cast<int64_t>(at)));  // prefix before it
    }
  }
}

TEST_CASE("scale_inplace multiplies every element by the factor") {
  FVec x = {1.0f, -2.0f, 0.25f};
  scale_inplace(x.data(), 3, 0.5f);
  CHECK(x == FVec{0.5f, -1.0f, 0.125f});
}

}  // namespace shardscope::engine::cpu::test
