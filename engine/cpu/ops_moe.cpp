// Mixture-of-experts ops: the router (softmax, top-k, renormalisation), the
// per-expert gather of token rows (dispatch), their weighted scatter-add back
// (combine), and Qwen2-MoE's sigmoid-gated shared expert. See ops.h.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cpu/check.h"
#include "engine/cpu/ops.h"

namespace shardscope::engine::cpu {

using detail::require;
using detail::require_index;
using detail::require_nonneg;
using detail::require_ptr;

void moe_router_forward(const float* logits, float* probs, int64_t* indices, float* weights,
                        int64_t n, int64_t experts, int64_t k, bool normalize, bool choose_topk) {
  const char* fn = "moe_router_forward";
  require_nonneg(fn, "n", n);
  require(experts >= 1 && k >= 1 && k <= experts, fn,
          "needs 1 <= k <= experts, got k = " + std::to_string(k) +
              ", experts = " + std::to_string(experts));
  require_ptr(fn, "logits", logits, n * experts);
  require_ptr(fn, "probs", probs, n * experts);
  require_ptr(fn, "indices", indices, n * k);
  require_ptr(fn, "weights", weights, n * k);
  std::vector<int64_t> order(static_cast<size_t>(experts));
  for (int64_t i = 0; i < n; ++i) {
    const float* x = logits + i * experts;
    float* p = probs + i * experts;
    const double mx = *std::max_element(x, x + experts);
    double sum = 0;
    for (int64_t e = 0; e < experts; ++e) sum += std::exp(static_cast<double>(x[e]) - mx);
    for (int64_t e = 0; e < experts; ++e)
      p[e] = static_cast<float>(std::exp(static_cast<double>(x[e]) - mx) / sum);
    int64_t* idx = indices + i * k;
    if (choose_topk) {
      for (int64_t e = 0; e < experts; ++e) order[static_cast<size_t>(e)] = e;
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [p](int64_t a, int64_t b) {
        return p[a] > p[b] || (p[a] == p[b] && a < b);
      });
      for (int64_t j = 0; j < k; ++j) idx[j] = order[static_cast<size_t>(j)];
    } else {
      for (int64_t j = 0; j < k; ++j) {
        require_index(fn, "expert index", idx[j], i * k + j, experts);
        for (int64_t m = 0; m < j; ++m)
          if (idx[m] == idx[j])
            throw std::invalid_argument(std::string(fn) + ": token " + std::to_string(i) +
                                        " names expert " + std::to_string(idx[j]) + " twice");
      }
    }
    float sum_k = 0;  // fp32, as torch sums the fp32 top-k values
    for (int64_t j = 0; j < k; ++j) sum_k += p[idx[j]];
    for (int64_t j = 0; j < k; ++j) weights[i * k + j] = normalize ? p[idx[j]] / sum_k : p[idx[j]];
  }
}

void moe_router_backward(const float* probs, const int64_t* indices, const float* dweights,
                         float* dlogits, int64_t n, int64_t experts, int64_t k, bool normalize) {
  const char* fn = "moe_router_backward";
  require_nonneg(fn, "n", n);
  require(experts >= 1 && k >= 1 && k <= experts, fn, "needs 1 <= k <= experts");
  require_ptr(fn, "probs", probs, n * experts);
  require_ptr(fn, "indices", indices, n * k);
  require_ptr(fn, "dweights", dweights, n * k);
  require_ptr(fn, "dlogits", dlogits, n * experts);
  std::vector<double> dp(static_cast<size_t>(experts));
  for (int64_t i = 0; i < n; ++i) {
    const float* p = probs + i * experts;
    const int64_t* idx = indices + i * k;
    const float* dw = dweights + i * k;
    for (int64_t j = 0; j < k; ++j) require_index(fn, "expert index", idx[j], i * k + j, experts);
    std::fill(dp.begin(), dp.end(), 0.0);
    if (normalize) {
      // w_j = p_j / S, S = sum_m p_m: dp_j = dw_j / S - sum_m dw_m p_m / S^2.
      double s = 0, dot = 0;
      for (int64_t j = 0; j < k; ++j) {
        s += p[idx[j]];
        dot += static_cast<double>(dw[j]) * p[idx[j]];
      }
      for (int64_t j = 0; j < k; ++j)
        dp[static_cast<size_t>(idx[j])] += static_cast<double>(dw[j]) / s - dot / (s * s);
    } else {
      for (int64_t j = 0; j < k; ++j) dp[static_cast<size_t>(idx[j])] += dw[j];
    }
    // Softmax: dlogit_e = p_e (dp_e - sum_m dp_m p_m).
    double dot = 0;
    for (int64_t e = 0; e < experts; ++e) dot += dp[static_cast<size_t>(e)] * p[e];
    float* d = dlogits + i * experts;
    for (int64_t e = 0; e < experts; ++e)
      d[e] += static_cast<float>(p[e] * (dp[static_cast<size_t>(e)] - dot));
  }
}

int64_t moe_dispatch_forward(const float* x, const int64_t* indices, float* xe, int64_t* slots,
                             int64_t tokens, int64_t seq, int64_t c, int64_t k, int64_t expert,
                             int64_t rows) {
  const char* fn = "moe_dispatch_forward";
  require_nonneg(fn, "tokens", tokens);
  require(seq >= 1 && tokens % seq == 0, fn,
          "seq = " + std::to_string(seq) + " does not divide tokens = " + std::to_string(tokens));
  require_nonneg(fn, "c", c);
  require_nonneg(fn, "rows", rows);
  require(k >= 1, fn, "k < 1");
  require_ptr(fn, "x", x, tokens * c);
  require_ptr(fn, "indices", indices, tokens * k);
  require_ptr(fn, "xe", xe, rows * c);
  require_ptr(fn, "slots", slots, rows);
  int64_t r = 0;
  for (int64_t b = 0; b < tokens / seq; ++b)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t t = b * seq; t < (b + 1) * seq; ++t) {
        if (indices[t * k + j] != expert) continue;
        if (r >= rows)
          throw std::out_of_range(std::string(fn) + ": expert " + std::to_string(expert) +
                                  " gets more than its " + std::to_string(rows) + " rows");
        std::copy(x + t * c, x + (t + 1) * c, xe + r * c);
        slots[r] = t * k + j;
        ++r;
      }
  std::fill(xe + r * c, xe + rows * c, 0.0f);
  std::fill(slots + r, slots + rows, int64_t{-1});
  return r;
}

void moe_dispatch_backward(const float* dxe, const int64_t* slots, float* dx, int64_t rows,
                           int64_t c, int64_t k, int64_t tokens) {
  const char* fn = "moe_dispatch_backward";
  require_nonneg(fn, "rows", rows);
  require(k >= 1, fn, "k < 1");
  require_ptr(fn, "dxe", dxe, rows * c);
  require_ptr(fn, "slots", slots, rows);
  require_ptr(fn, "dx", dx, tokens * c);
  for (int64_t r = 0; r < rows; ++r) {
    if (slots[r] < 0) continue;
    require_index(fn, "slot", slots[r], r, tokens * k);
    float* d = dx + (slots[r] / k) * c;
    const float* g = dxe + r * c;
    for (int64_t i = 0; i < c; ++i) d[i] += g[i];
  }
}

void moe_combine_forward(const float* const* y, const int64_t* const* slots, const int64_t* rows,
                         int64_t experts, const float* weights, float* out, int64_t tokens,
                         int64_t c, int64_t k, float* const* weighted) {
  const char* fn = "moe_combine_forward";
  require_nonneg(fn, "tokens", tokens);
  require(k >= 1, fn, "k < 1");
  require_ptr(fn, "weights", weights, tokens * k);
  require_ptr(fn, "out", out, tokens * c);
  std::fill(out, out + tokens * c, 0.0f);
  for (int64_t e = 0; e < experts; ++e) {
    require_ptr(fn, "y", y[e], rows[e] * c);
    require_ptr(fn, "slots", slots[e], rows[e]);
    float* prod = weighted != nullptr ? weighted[e] : nullptr;
    if (prod != nullptr) require_ptr(fn, "weighted", prod, rows[e] * c);
    for (int64_t r = 0; r < rows[e]; ++r) {
      const int64_t s = slots[e][r];
      if (s < 0) {  // a padding row: no token, a zero product
        if (prod != nullptr) std::fill(prod + r * c, prod + (r + 1) * c, 0.0f);
        continue;
      }
      require_index(fn, "slot", s, r, tokens * k);
      const float w = weights[s];
      const float* src = y[e] + r * c;
      float* dst = out + (s / k) * c;
      for (int64_t i = 0; i < c; ++i) dst[i] += w * src[i];
      if (prod != nullptr)
        for (int64_t i = 0; i < c; ++i) prod[r * c + i] = w * src[i];
    }
  }
}

void moe_combine_backward(const float* const* y, const int64_t* const* slots, const int64_t* rows,
                          int64_t experts, const float* weights, const float* dout,
                          float* const* dy, float* dweights, int64_t tokens, int64_t c, int64_t k) {
  const char* fn = "moe_combine_backward";
  require_nonneg(fn, "tokens", tokens);
  require(k >= 1, fn, "k < 1");
  require_ptr(fn, "weights", weights, tokens * k);
  require_ptr(fn, "dout", dout, tokens * c);
  require_ptr(fn, "dweights", dweights, tokens * k);
  for (int64_t e = 0; e < experts; ++e) {
    require_ptr(fn, "y", y[e], rows[e] * c);
    require_ptr(fn, "dy", dy[e], rows[e] * c);
    require_ptr(fn, "slots", slots[e], rows[e]);
    for (int64_t r = 0; r < rows[e]; ++r) {
      const int64_t s = slots[e][r];
      if (s < 0) continue;
      require_index(fn, "slot", s, r, tokens * k);
      const float w = weights[s];
      const float* g = dout + (s / k) * c;
      const float* src = y[e] + r * c;
      float* d = dy[e] + r * c;
      double dot = 0;
      for (int64_t i = 0; i < c; ++i) {
        d[i] += w * g[i];
        dot += static_cast<double>(g[i]) * src[i];
      }
      dweights[s] += static_cast<float>(dot);
    }
  }
}

void sigmoid_gate_forward(const float* g, const float* x, float* y, float* sig, int64_t n,
                          int64_t c) {
  const char* fn = "sigmoid_gate_forward";
  require_nonneg(fn, "n", n);
  require_nonneg(fn, "c", c);
  require_ptr(fn, "g", g, n);
  require_ptr(fn, "x", x, n * c);
  require_ptr(fn, "y", y, n * c);
  require_ptr(fn, "sig", sig, n);
  for (int64_t i = 0; i < n; ++i) {
    const float s = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(g[i]))));
    sig[i] = s;
    for (int64_t j = 0; j < c; ++j) y[i * c + j] = s * x[i * c + j];
  }
}

void sigmoid_gate_backward(const float* sig, const float* x, const float* dy, float* dg, float* dx,
                           int64_t n, int64_t c) {
  const char* fn = "sigmoid_gate_backward";
  require_nonneg(fn, "n", n);
  require_nonneg(fn, "c", c);
  require_ptr(fn, "sig", sig, n);
  require_ptr(fn, "x", x, n * c);
  require_ptr(fn, "dy", dy, n * c);
  require_ptr(fn, "dg", dg, n);
  require_ptr(fn, "dx", dx, n * c);
  for (int64_t i = 0; i < n; ++i) {
    const float s = sig[i];
    double dot = 0;
    for (int64_t j = 0; j < c; ++j) {
      dx[i * c + j] += s * dy[i * c + j];
      dot += static_cast<double>(dy[i * c + j]) * x[i * c + j];
    }
    dg[i] += static_cast<float>(dot * s * (1.0 - s));
  }
}

}  // namespace shardscope::engine::cpu
