// AdamW and SGD on flat fp32 shards, element by element in the order of
// PyTorch's single-tensor (foreach=False) implementations: hyperparameters are
// combined in double on the host, then applied as float scalars, as torch does
// for a Python scalar on a float tensor.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/cpu/check.h"
#include "engine/cpu/optim.h"

namespace shardscope::engine::cpu {

using detail::require;
using detail::require_nonneg;
using detail::require_ptr;

void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& h,
                int64_t step) {
  const char* fn = "adamw_step";
  require_nonneg(fn, "n", n);
  require(step >= 1, fn, "step = " + std::to_string(step) + " < 1 (steps are 1-based)");
  require(h.beta1 >= 0.0 && h.beta1 < 1.0, fn,
          "beta1 = " + std::to_string(h.beta1) + " outside [0, 1)");
  require(h.beta2 >= 0.0 && h.beta2 < 1.0, fn,
          "beta2 = " + std::to_string(h.beta2) + " outside [0, 1)");
  require(h.eps >= 0.0, fn, "eps < 0");
  require_ptr(fn, "p", p, n);
  require_ptr(fn, "g", g, n);
  require_ptr(fn, "m", m, n);
  require_ptr(fn, "v", v, n);
  const auto k = static_cast<double>(step);
  const auto decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  const auto w1 = static_cast<float>(1.0 - h.beta1);  // lerp weight of m towards g
  const auto beta2 = static_cast<float>(h.beta2);
  const auto w2 = static_cast<float>(1.0 - h.beta2);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, k);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, k);
  const auto neg_step_size = static_cast<float>(-(h.lr / bias_correction1));
  const auto bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const auto eps = static_cast<float>(h.eps);
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    float pi = p[i] * decay;
    // torch.lerp(m, g, w1): m + w1 (g - m) for w1 < 0.5, else g - (g - m)(1 - w1).
    m[i] = w1 < 0.5f ? m[i] + w1 * (gi - m[i]) : gi - (gi - m[i]) * (1.0f - w1);
    v[i] = v[i] * beta2 + w2 * gi * gi;
    const float denom = std::sqrt(v[i]) / bias_correction2_sqrt + eps;
    pi += neg_step_size * (m[i] / denom);
    p[i] = pi;
  }
}

void sgd_step(float* p, const float* g, float* buf, int64_t n, const SgdParams& h, int64_t step) {
  const char* fn = "sgd_step";
  require_nonneg(fn, "n", n);
  require(step >= 1, fn, "step = " + std::to_string(step) + " < 1 (steps are 1-based)");
  require(h.momentum >= 0.0, fn, "momentum = " + std::to_string(h.momentum) + " < 0");
  require_ptr(fn, "p", p, n);
  require_ptr(fn, "g", g, n);
  if (h.momentum != 0.0) require_ptr(fn, "buf (momentum > 0)", buf, n);
  const auto wd = static_cast<float>(h.weight_decay);
  const auto momentum = static_cast<float>(h.momentum);
  const auto neg_lr = static_cast<float>(-h.lr);
  for (int64_t i = 0; i < n; ++i) {
    float d = h.weight_decay != 0.0 ? g[i] + wd * p[i] : g[i];
    if (h.momentum != 0.0) {
      buf[i] = step == 1 ? d : buf[i] * momentum + d;
      d = buf[i];
    }
    p[i] += neg_lr * d;
  }
}

double squared_norm(const float* x, int64_t n) {
  require_nonneg("squared_norm", "n", n);
  require_ptr("squared_norm", "x", x, n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

void scale_inplace(float* x, int64_t n, float factor) {
  require_nonneg("scale_inplace", "n", n);
  require_ptr("scale_inplace", "x", x, n);
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

bool has_inf_or_nan(const float* x, int64_t n) {
  require_nonneg("has_inf_or_nan", "n", n);
  require_ptr("has_inf_or_nan", "x", x, n);
  // An all-ones exponent field is inf or NaN; an integer OR over all elements
  // (no early exit) vectorises.
  uint32_t special = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    special |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
  }
  return special != 0;
}

float clip_factor(double total_norm, double max_norm) {
  return static_cast<float>(std::min(max_norm / (total_norm + kClipNormEps), 1.0));
}

}  // namespace shardscope::engine::cpu
