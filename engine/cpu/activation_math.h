// Scalar activations and their derivatives in fp32, shared by the
// elementwise ops (ops_pointwise.cpp: GELU, SwiGLU) and the gated MLP ops
// (ops_gated.cpp: SiLU, GELU and GELU-tanh gates). One definition, so that
// both round alike: the engine's results are compared bit for bit across
// rank counts, and the order of evaluation below is part of that contract.
#pragma once

#include <cmath>

namespace shardscope::engine::cpu::detail {

constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.3989422804014327f;  // 1 / sqrt(2 pi)

inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
inline float gelu_tanh(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}

// 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
inline float gelu_tanh_grad(float x) {
  const float th = std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

// 0.5 x (1 + erf(x / sqrt 2))
inline float gelu_erf(float x) {
  return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
}

// Phi(x) + x phi(x)
inline float gelu_erf_grad(float x) {
  const float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2));
  const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x * x);
  return cdf + x * pdf;
}

}  // namespace shardscope::engine::cpu::detail
