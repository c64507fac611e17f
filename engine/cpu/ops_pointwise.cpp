// Elementwise ops: GELU (tanh and erf forms), ReLU, SwiGLU, residual add.
#include <cmath>
#include <string>
#include <vector>

#include "engine/cpu/activation_math.h"
#include "engine/cpu/check.h"
#include "engine/cpu/ops.h"

namespace shardscope::engine::cpu {

using detail::require;
using detail::require_nonneg;
using detail::require_ptr;

using detail::gelu_erf;
using detail::gelu_erf_grad;
using detail::gelu_tanh;
using detail::gelu_tanh_grad;
using detail::sigmoid;

void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approximation) {
  const char* fn = "gelu_forward";
  require_nonneg(fn, "n", n);
  require_ptr(fn, "x", x, n);
  require_ptr(fn, "y", y, n);
  if (tanh_approximation) {
    for (int64_t i = 0; i < n; ++i) y[i] = gelu_tanh(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = gelu_erf(x[i]);
  }
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approximation) {
  const char* fn = "gelu_backward";
  require_nonneg(fn, "n", n);
  require_ptr(fn, "x", x, n);
  require_ptr(fn, "dy", dy, n);
  require_ptr(fn, "dx", dx, n);
  if (tanh_approximation) {
    for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * gelu_tanh_grad(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * gelu_erf_grad(x[i]);
  }
}

void relu_forward(const float* x, float* y, int64_t n) {
  const char* fn = "relu_forward";
  require_nonneg(fn, "n", n);
  require_ptr(fn, "x", x, n);
  require_ptr(fn, "y", y, n);
  // NaN propagates (NaN < 0 is false), as torch.relu does.
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

void relu_backward(const float* y, const float* dy, float* dx, int64_t n) {
  const char* fn = "relu_backward";
  require_nonneg(fn, "n", n);
  require_ptr(fn, "y", y, n);
  require_ptr(fn, "dy", dy, n);
  require_ptr(fn, "dx", dx, n);
  // Gradient 0 where the output is 0 (x <= 0), as torch's threshold_backward.
  for (int64_t i = 0; i < n; ++i) dx[i] += y[i] > 0.0f ? dy[i] : 0.0f;
}

void swiglu_forward(const float* gate, const float* up, float* y, int64_t n) {
  const char* fn = "swiglu_forward";
  require_nonneg(fn, "n", n);
  require_ptr(fn, "gate", gate, n);
  require_ptr(fn, "up", up, n);
  require_ptr(fn, "y", y, n);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    y[i] = g * sigmoid(g) * up[i];
  }
}

void swiglu_backward(const float* gate, const float* up, const float* dy, float* dgate, float* dup,
                     int64_t n) {
  const char* fn = "swiglu_backward";
  require_nonneg(fn, "n", n);
  require_ptr(fn, "gate", gate, n);
  require_ptr(fn, "up", up, n);
  require_ptr(fn, "dy", dy, n);
  require_ptr(fn, "dgate", dgate, n);
  require_ptr(fn, "dup", dup, n);
  // silu'(g) = sig (1 + g (1 - sig))
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float sig = sigmoid(g);
    const float silu = g * sig;
    dgate[i] += dy[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
    dup[i] += dy[i] * silu;
  }
}

void residual_forward(const float* a, const float* b, float* y, int64_t n, int64_t b_n) {
  const char* fn = "residual_forward";
  require_nonneg(fn, "n", n);
  require(b_n >= 1 && b_n <= n && n % b_n == 0, fn,
          "b_n = " + std::to_string(b_n) + " does not divide n = " + std::to_string(n));
  require_ptr(fn, "a", a, n);
  require_ptr(fn, "b", b, b_n);
  require_ptr(fn, "y", y, n);
  for (int64_t r = 0; r < n; r += b_n) {
    const float* ar = a + r;
    float* yr = y + r;
    for (int64_t j = 0; j < b_n; ++j) yr[j] = ar[j] + b[j];
  }
}

void residual_backward(const float* dy, float* da, float* db, int64_t n, int64_t b_n) {
  const char* fn = "residual_backward";
  require_nonneg(fn, "n", n);
  require(b_n >= 1 && b_n <= n && n % b_n == 0, fn,
          "b_n = " + std::to_string(b_n) + " does not divide n = " + std::to_string(n));
  require_ptr(fn, "dy", dy, n);
  if (da != nullptr)
    for (int64_t i = 0; i < n; ++i) da[i] += dy[i];
  if (db == nullptr) return;
  if (b_n == n) {
    for (int64_t i = 0; i < n; ++i) db[i] += dy[i];
    return;
  }
  // Broadcast: sum the n / b_n rows in double, in row order, then add once.
  std::vector<double> sum(static_cast<size_t>(b_n), 0.0);
  for (int64_t r = 0; r < n; r += b_n) {
    const float* dyr = dy + r;
    for (int64_t j = 0; j < b_n; ++j) sum[j] += dyr[j];
  }
  for (int64_t j = 0; j < b_n; ++j) db[j] += static_cast<float>(sum[j]);
}

}  // namespace shardscope::engine::cpu
