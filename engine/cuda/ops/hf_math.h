// Per-element and index math of the CUDA ops that the Gemma, Gemma 2, Phi-3,
// Qwen3 and OPT graphs add to Llama's (gated.cu, norm.cu, embedding.cu):
// gated MLP activations over strided gate/up rows, tanh soft-capping, the
// (offset + w) RMSNorm weight and the embedding rows a backward updates.
//
// The header compiles as plain C++ too (SS_HD is empty there and the
// transcendental functions are std::'s, as engine/cpu uses them), so that
// tests/engine/cuda/test_cuda_hf_math.cpp checks on any machine that these
// functions reproduce the CPU twins (engine/cpu/ops_gated.cpp,
// ops_norm.cpp, ops_embedding.cpp) bit for bit on the host; on the device
// tanhf / erff / expf may differ from glibc's in the last fp32 bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/host_device.h"

namespace shardscope::engine::cuda::hf {

// fp32 transcendental functions: CUDA's on the device, std::'s on the host.
SS_HD inline float hd_exp(float x) {
#ifdef __CUDA_ARCH__
  return expf(x);
#else
  return std::exp(x);
#endif
}
SS_HD inline float hd_tanh(float x) {
#ifdef __CUDA_ARCH__
  return tanhf(x);
#else
  return std::tanh(x);
#endif
}
SS_HD inline float hd_erf(float x) {
#ifdef __CUDA_ARCH__
  return erff(x);
#else
  return std::erf(x);
#endif
}

// engine/cpu/activation_math.h's constants.
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.3989422804014327f;  // 1 / sqrt(2 pi)

SS_HD inline float sigmoid(float x) {
  return 1.0f / (1.0f + hd_exp(-x));
}

// act(g), in the order of evaluation of cpu::detail (activation_math.h).
SS_HD inline float gate_value(float g, cpu::GateActivation act) {
  switch (act) {
    case cpu::GateActivation::silu:
      return g * sigmoid(g);
    case cpu::GateActivation::gelu:
      return 0.5f * g * (1.0f + hd_erf(g * kInvSqrt2));
    case cpu::GateActivation::gelu_tanh:
      break;
  }
  const float u = kSqrt2OverPi * (g + kGeluCubic * g * g * g);
  return 0.5f * g * (1.0f + hd_tanh(u));
}

// act'(g) for the GELU forms (SiLU's backward is gated_backward_element's own
// expression, swiglu_backward's).
SS_HD inline float gate_grad(float g, cpu::GateActivation act) {
  if (act == cpu::GateActivation::gelu) {
    const float cdf = 0.5f * (1.0f + hd_erf(g * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * hd_exp(-0.5f * g * g);
    return cdf + g * pdf;
  }
  const float th = hd_tanh(kSqrt2OverPi * (g + kGeluCubic * g * g * g));
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * g * g);
  return 0.5f * (1.0f + th) + 0.5f * g * (1.0f - th * th) * du;
}

// y = act(gate) * up for one element.
SS_HD inline float gated_value(float g, float u, cpu::GateActivation act) {
  return gate_value(g, act) * u;
}

// dgate += dy * up * act'(gate), dup += dy * act(gate) for one element
// (cpu::gated_backward's expressions, SiLU's being swiglu_backward's).
SS_HD inline void gated_backward_element(float g, float u, float dy, cpu::GateActivation act,
                                         float& dgate, float& dup) {
  if (act == cpu::GateActivation::silu) {
    const float sig = sigmoid(g);
    dgate += dy * u * sig * (1.0f + g * (1.0f - sig));
    dup += dy * (g * sig);
    return;
  }
  dgate += dy * u * gate_grad(g, act);
  dup += dy * gate_value(g, act);
}

// Element i of a dense [rows, width] tensor (y, dy) sits at this offset of a
// gate/up operand whose rows start `stride` elements apart (stride >= width):
// Phi-3's packed gate_up [N, 2F] has stride 2F (up = gate + F); an unpacked
// operand is one row of rows * width (offset i).
SS_HD inline int64_t strided_offset(int64_t i, int64_t width, int64_t stride) {
  return i / width * stride + i % width;
}

// th = tanh(x / cap), y = cap * th: y from th before any rounding of th
// (cpu::softcap_forward).
SS_HD inline void softcap_element(float x, float cap, float& y, float& th) {
  th = hd_tanh(x / cap);
  y = cap * th;
}

// d/dx cap * tanh(x / cap) = 1 - th^2.
SS_HD inline float softcap_slope(float th) {
  return 1.0f - th * th;
}

// RMSNorm's effective weight: offset + w (Gemma's (1 + w); offset 0: w itself,
// since w + 0.0f == w up to the sign of a zero, which the product keeps at 0).
SS_HD inline float rms_weight(float w, float offset) {
  return offset + w;
}

// The table row an embedding backward adds output row i to: ids[i] (or i for
// positions, ids null), -1 when that id is outside [0, rows) (the forward
// flagged it) or is padding_idx (nn.Embedding's padding row gets no gradient;
// -1: none). Positions are never padding (cpu::embedding_backward).
SS_HD inline int64_t embedding_grad_row(const int64_t* ids, int64_t i, int64_t rows,
                                        int64_t padding_idx) {
  if (ids == nullptr) return i < rows ? i : -1;
  const int64_t id = ids[i];
  return id >= 0 && id < rows && id != padding_idx ? id : -1;
}

}  // namespace shardscope::engine::cuda::hf
