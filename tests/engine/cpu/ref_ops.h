// Float64 reference forwards of the CPU ops, written from the math (and, for
// RoPE, from Hugging Face's rotate_half code), independently of the float
// implementation. Shapes follow engine/cpu/ops.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/cpu/ops.h"

namespace shardscope::engine::cpu::test {

using RVec = std::vector<double>;

// y[n, out] = x @ W^T + b; W [out, in] (out_in) or [in, out] (in_out); b empty: none.
inline RVec linear_ref(const RVec& x, const RVec& w, const RVec& b, int64_t n, int64_t in,
                       int64_t out, WeightLayout layout) {
  RVec y(static_cast<size_t>(n * out));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in; ++i)
        s += x[r * in + i] * (layout == WeightLayout::out_in ? w[o * in + i] : w[i * out + o]);
      y[r * out + o] = s;
    }
  return y;
}

struct NormRef {
  RVec y, mean, rstd;
};

inline NormRef layernorm_ref(const RVec& x, const RVec& w, const RVec& b, int64_t n, int64_t c,
                             double eps) {
  NormRef r{RVec(x.size()), RVec(n), RVec(n)};
  for (int64_t i = 0; i < n; ++i) {
    double mu = 0.0;
    for (int64_t j = 0; j < c; ++j) mu += x[i * c + j];
    mu /= static_cast<double>(c);
    double var = 0.0;
    for (int64_t j = 0; j < c; ++j) var += (x[i * c + j] - mu) * (x[i * c + j] - mu);
    var /= static_cast<double>(c);
    const double rstd = 1.0 / std::sqrt(var + eps);
    r.mean[i] = mu;
    r.rstd[i] = rstd;
    for (int64_t j = 0; j < c; ++j) r.y[i * c + j] = (x[i * c + j] - mu) * rstd * w[j] + b[j];
  }
  return r;
}

inline NormRef rmsnorm_ref(const RVec& x, const RVec& w, int64_t n, int64_t c, double eps) {
  NormRef r{RVec(x.size()), RVec(), RVec(n)};
  for (int64_t i = 0; i < n; ++i) {
    double ms = 0.0;
    for (int64_t j = 0; j < c; ++j) ms += x[i * c + j] * x[i * c + j];
    const double rstd = 1.0 / std::sqrt(ms / static_cast<double>(c) + eps);
    r.rstd[i] = rstd;
    for (int64_t j = 0; j < c; ++j) r.y[i * c + j] = x[i * c + j] * rstd * w[j];
  }
  return r;
}

// Hugging Face apply_rotary_pos_emb on one head vector at position t:
// x * cos + rotate_half(x) * sin, cos = cat(cos(t f), cos(t f)), rotate_half(x) =
// cat(-x[D/2:], x[:D/2]), f_i = theta^(-2i/D). rot < d (GPT-NeoX's partial
// rotary): the same on x[:rot] with rot for D, then cat with x[rot:] unchanged.
inline RVec rope_ref(const double* x, int64_t d, int64_t t, double theta, int64_t rot = 0) {
  if (rot == 0) rot = d;
  const int64_t half = rot / 2;
  RVec rotated(static_cast<size_t>(rot)), out(x, x + d);
  for (int64_t i = 0; i < half; ++i) {
    rotated[i] = -x[i + half];
    rotated[i + half] = x[i];
  }
  for (int64_t i = 0; i < rot; ++i) {
    const double freq = std::pow(theta, -2.0 * static_cast<double>(i % half) / rot);
    const double angle = static_cast<double>(t) * freq;
    out[i] = x[i] * std::cos(angle) + rotated[i] * std::sin(angle);
  }
  return out;
}

struct AttentionRef {
  RVec out;  // [B, T, H*D]
  RVec lse;  // [B, H, T]
};

// Naive causal softmax attention over the full score row of each query, with
// the shape's soft-capping and sliding window.
// head_stride: elements between heads within a row (0: D).
inline AttentionRef attention_ref(const AttentionShape& s, const double* q, const double* k,
                                  const double* v, int64_t q_stride, int64_t kv_stride,
                                  int64_t head_stride = 0) {
  const int64_t B = s.batch, T = s.seq, H = s.n_head, D = s.head_dim;
  const int64_t hs = head_stride == 0 ? D : head_stride;
  const int64_t group = H / s.n_kv_head;
  AttentionRef r{RVec(static_cast<size_t>(B * T * H * D)), RVec(static_cast<size_t>(B * H * T))};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / group;
      for (int64_t t = 0; t < T; ++t) {
        const double* qsrc = q + (b * T + t) * q_stride + h * hs;
        const RVec qv =
            s.rope ? rope_ref(qsrc, D, t, s.rope_theta, s.rotary_dim) : RVec(qsrc, qsrc + D);
        RVec scores(static_cast<size_t>(t + 1));
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= t; ++j) {
          const double* ksrc = k + (b * T + j) * kv_stride + hk * hs;
          const RVec kv =
              s.rope ? rope_ref(ksrc, D, j, s.rope_theta, s.rotary_dim) : RVec(ksrc, ksrc + D);
          double dotp = 0.0;
          for (int64_t d = 0; d < D; ++d) dotp += qv[d] * kv[d];
          scores[j] = s.scale * dotp;
          if (s.softcap > 0) scores[j] = s.softcap * std::tanh(scores[j] / s.softcap);
          // Sliding window: keys j <= t - W are masked (probability 0).
          if (s.sliding_window > 0 && j <= t - s.sliding_window)
            scores[j] = -std::numeric_limits<double>::infinity();
          mx = std::max(mx, scores[j]);
        }
        double z = 0.0;
        for (int64_t j = 0; j <= t; ++j) z += std::exp(scores[j] - mx);
        for (int64_t d = 0; d < D; ++d) {
          double o = 0.0;
          for (int64_t j = 0; j <= t; ++j)
            o += std::exp(scores[j] - mx) / z * v[(b * T + j) * kv_stride + hk * hs + d];
          r.out[(b * T + t) * H * D + h * D + d] = o;
        }
        r.lse[(b * H + h) * T + t] = mx + std::log(z);
      }
    }
  return r;
}

inline double gelu_tanh_ref(double x) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
inline double gelu_erf_ref(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}
inline double silu_ref(double x) {
  return x / (1.0 + std::exp(-x));
}

// Mean cross entropy; log_probs [N, V] written when non-null.
inline double cross_entropy_ref(const RVec& logits, const std::vector<int64_t>& labels, int64_t n,
                                int64_t v, RVec* log_probs = nullptr) {
  double total = 0.0;
  if (log_probs != nullptr) log_probs->assign(static_cast<size_t>(n * v), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double z = 0.0;
    for (int64_t j = 0; j < v; ++j) z += std::exp(logits[i * v + j]);
    const double log_z = std::log(z);
    if (log_probs != nullptr)
      for (int64_t j = 0; j < v; ++j) (*log_probs)[i * v + j] = logits[i * v + j] - log_z;
    total += log_z - logits[i * v + labels[i]];
  }
  return total / static_cast<double>(n);
}

}  // namespace shardscope::engine::cpu::test
