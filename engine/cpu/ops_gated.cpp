// Gated MLP activations (SiLU, GELU erf and tanh forms) with strided gate/up
// rows, the constant scale, and tanh soft-capping: the ops of the Gemma,
// Gemma 2 and Phi-3 graphs beyond Llama's.
#include <cmath>
#include <string>

#include "engine/cpu/activation_math.h"
#include "engine/cpu/check.h"
#include "engine/cpu/ops.h"

namespace shardscope::engine::cpu {

using detail::require;
using detail::require_nonneg;
using detail::require_ptr;

namespace {

using detail::sigmoid;

// act(g) and act'(g): activation_math.h, as swiglu_* and gelu_* use it.
inline float act_value(float g, GateActivation act) {
  switch (act) {
    case GateActivation::silu:
      return g * sigmoid(g);
    case GateActivation::gelu:
      return detail::gelu_erf(g);
    case GateActivation::gelu_tanh:
      return detail::gelu_tanh(g);
  }
  return 0.0f;
}

inline float act_grad(float g, GateActivation act) {
  switch (act) {
    case GateActivation::silu: {
      const float sig = sigmoid(g);
      return sig * (1.0f + g * (1.0f - sig));
    }
    case GateActivation::gelu:
      return detail::gelu_erf_grad(g);
    case GateActivation::gelu_tanh:
      return detail::gelu_tanh_grad(g);
  }
  return 0.0f;
}

void check_gated(const char* fn, int64_t rows, int64_t width, int64_t stride) {
  require_nonneg(fn, "rows", rows);
  require_nonneg(fn, "width", width);
  require(stride >= width, fn,
          "stride " + std::to_string(stride) + " < width " + std::to_string(width));
}

// Elements a strided [rows, width] operand spans.
int64_t span(int64_t rows, int64_t width, int64_t stride) {
  return rows == 0 ? 0 : (rows - 1) * stride + width;
}

}  // namespace

void gated_forward(const float* gate, const float* up, float* y, int64_t rows, int64_t width,
                   int64_t stride, GateActivation act) {
  const char* fn = "gated_forward";
  check_gated(fn, rows, width, stride);
  require_ptr(fn, "gate", gate, span(rows, width, stride));
  require_ptr(fn, "up", up, span(rows, width, stride));
  require_ptr(fn, "y", y, rows * width);
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * stride;
    const float* u = up + r * stride;
    float* yr = y + r * width;
    for (int64_t i = 0; i < width; ++i) yr[i] = act_value(g[i], act) * u[i];
  }
}

void gated_backward(const float* gate, const float* up, const float* dy, float* dgate, float* dup,
                    int64_t rows, int64_t width, int64_t stride, GateActivation act) {
  const char* fn = "gated_backward";
  check_gated(fn, rows, width, stride);
  const int64_t n = span(rows, width, stride);
  require_ptr(fn, "gate", gate, n);
  require_ptr(fn, "up", up, n);
  require_ptr(fn, "dy", dy, rows * width);
  require_ptr(fn, "dgate", dgate, n);
  require_ptr(fn, "dup", dup, n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * stride;
    const float* u = up + r * stride;
    const float* d = dy + r * width;
    float* dg = dgate + r * stride;
    float* du = dup + r * stride;
    for (int64_t i = 0; i < width; ++i) {
      if (act == GateActivation::silu) {  // swiglu_backward's expression, same rounding
        const float sig = sigmoid(g[i]);
        dg[i] += d[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
        du[i] += d[i] * (g[i] * sig);
        continue;
      }
      dg[i] += d[i] * u[i] * act_grad(g[i], act);
      du[i] += d[i] * act_value(g[i], act);
    }
  }
}

void scale_forward(const float* x, float* y, int64_t n, float scale) {
  const char* fn = "scale_forward";
  require_nonneg(fn, "n", n);
  require_ptr(fn, "x", x, n);
  require_ptr(fn, "y", y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
}

void scale_backward(const float* dy, float* dx, int64_t n, float scale) {
  const char* fn = "scale_backward";
  require_nonneg(fn, "n", n);
  require_ptr(fn, "dy", dy, n);
  require_ptr(fn, "dx", dx, n);
  for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * scale;
}

void softcap_forward(const float* x, float* y, float* th, int64_t n, float cap) {
  const char* fn = "softcap_forward";
  require_nonneg(fn, "n", n);
  require(cap > 0.0f && std::isfinite(cap), fn, "cap must be finite and > 0");
  require_ptr(fn, "x", x, n);
  require_ptr(fn, "y", y, n);
  require_ptr(fn, "th", th, n);
  for (int64_t i = 0; i < n; ++i) {
    const float t = std::tanh(x[i] / cap);
    th[i] = t;
    y[i] = cap * t;
  }
}

void softcap_backward(const float* th, const float* dy, float* dx, int64_t n) {
  const char* fn = "softcap_backward";
  require_nonneg(fn, "n", n);
  require_ptr(fn, "th", th, n);
  require_ptr(fn, "dy", dy, n);
  require_ptr(fn, "dx", dx, n);
  // d/dx cap * tanh(x / cap) = 1 - tanh^2
  for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * (1.0f - th[i] * th[i]);
}

}  // namespace shardscope::engine::cpu
