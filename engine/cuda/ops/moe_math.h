// Per-row and index math of the mixture-of-experts kernels (moe.cu), written
// once for the device and the host: every function here compiles as plain
// C++ (no CUDA header), so tests/engine/cuda/test_cuda_moe_math.cpp checks it
// on any machine against the CPU engine's ops (engine/cpu/ops_moe.cpp, the
// "CPU twin") and exec::forced_routing.
//
// Exactness: the router and the sigmoid gate follow the CPU op's arithmetic
// step by step (softmax in fp64, the fp32 sum of the top-k probabilities,
// fp64 gradients), and products go through mul_rn, which never contracts into
// a fused multiply-add on the device, so on the host these functions give the
// CPU op's bits and on the device they differ only by the device's exp
// (within 1 ulp of fp64 before rounding to fp32).
#pragma once

#include <math.h>

#include <cstdint>

#include "engine/cuda/ops/host_device.h"

namespace shardscope::engine::cuda::moe {

// a * b rounded once (no FMA contraction on the device).
SS_HD inline double mul_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
SS_HD inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// Top-k order of the CPU router: higher probability first, ties to the lower
// expert index (a strict total order, so the top k are unique).
SS_HD inline bool ranks_before(float pa, int64_t a, float pb, int64_t b) {
  return pa > pb || (pa == pb && a < b);
}

// Forced routing (exec::forced_routing): per sequence the T*k slots, taken
// choice-major (s = choice * T + position), go to expert e while s <
// ends[e], ends the cumulative per-sequence counts (ends[E-1] = T*k).
// Returns the first e with s < ends[e] (binary search; E when s >= T*k).
SS_HD inline int64_t forced_expert(const int64_t* ends, int64_t experts, int64_t s) {
  int64_t lo = 0, hi = experts;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (s < ends[mid])
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// The order in which cpu::moe_dispatch_forward fills an expert's rows: for
// each sequence b, each choice j, each position t. Entry q of that order
// (q < tokens * k) is the flat slot (b*T + t) * k + j of indices[tokens, k].
SS_HD inline int64_t dispatch_slot(int64_t q, int64_t seq, int64_t k) {
  const int64_t per_seq = seq * k;
  const int64_t b = q / per_seq, rem = q % per_seq;
  const int64_t j = rem / seq, t = b * seq + rem % seq;
  return t * k + j;
}

// sigmoid(g) as cpu::sigmoid_gate_forward rounds it: in fp64, then to fp32.
SS_HD inline float sigmoid_of(float g) {
  return static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(g))));
}

// Softmax statistics of one token's router logits: max and sum of
// exp(x - max) in fp64 (cpu::moe_router_forward's).
struct SoftmaxRow {
  double max = 0, sum = 0;
  template <typename Logit>
  SS_HD static SoftmaxRow of(Logit logit, int64_t experts) {
    SoftmaxRow r;
    float mx = logit(0);
    for (int64_t e = 1; e < experts; ++e) {
      const float v = logit(e);
      if (mx < v) mx = v;  // std::max_element: the first of equal maxima (same value)
    }
    r.max = mx;
    for (int64_t e = 0; e < experts; ++e) r.sum += exp(static_cast<double>(logit(e)) - r.max);
    return r;
  }
  SS_HD float prob(float logit) const {
    return static_cast<float>(exp(static_cast<double>(logit) - max) / sum);
  }
};

// One token of cpu::moe_router_forward: store_prob(e, p_e) for every expert;
// idx[0..k) = the top-k experts (choose_topk) or, as given, the forced ones;
// store_weight(j, w_j) = p of idx[j], divided by their fp32 sum when
// `normalize`. Probabilities used for the choice and the weights are the
// unrounded fp32 values (the stored ones may be rounded to 16 bits).
template <typename Logit, typename StoreProb, typename StoreWeight>
SS_HD void router_forward_row(Logit logit, int64_t experts, int64_t k, bool normalize,
                              bool choose_topk, int64_t* idx, StoreProb store_prob,
                              StoreWeight store_weight) {
  const SoftmaxRow sm = SoftmaxRow::of(logit, experts);
  for (int64_t e = 0; e < experts; ++e) store_prob(e, sm.prob(logit(e)));
  if (choose_topk) {
    // Selection, one pass per choice: the j-th pass takes the best expert not
    // yet chosen, which is partial_sort's j-th element under this total order.
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      float best_p = 0;
      for (int64_t e = 0; e < experts; ++e) {
        bool taken = false;
        for (int64_t m = 0; m < j; ++m) taken = taken || idx[m] == e;
        if (taken) continue;
        const float p = sm.prob(logit(e));
        if (best < 0 || ranks_before(p, e, best_p, best)) {
          best = e;
          best_p = p;
        }
      }
      idx[j] = best;
    }
  }
  float sum_k = 0;  // fp32, as torch sums the fp32 top-k values
  for (int64_t j = 0; j < k; ++j) sum_k += sm.prob(logit(idx[j]));
  for (int64_t j = 0; j < k; ++j) {
    const float p = sm.prob(logit(idx[j]));
    store_weight(j, normalize ? p / sum_k : p);
  }
}

// One token of cpu::moe_router_backward: add_dlogit(e, v) with v the fp32
// gradient of logit e, from probs p (prob(e)), the experts idx[0..k) and the
// weights' gradients dweight(j). Sums in fp64 in the CPU op's order.
template <typename Prob, typename DWeight, typename AddDlogit>
SS_HD void router_backward_row(Prob prob, const int64_t* idx, DWeight dweight, int64_t experts,
                               int64_t k, bool normalize, AddDlogit add_dlogit) {
  // normalize: w_j = p_j / S, S = sum_m p_m, so dp_j = dw_j / S - sum_m dw_m p_m / S^2.
  double s = 0, dot_w = 0;
  if (normalize)
    for (int64_t j = 0; j < k; ++j) {
      const double p = prob(idx[j]);
      s += p;
      dot_w += mul_rn(static_cast<double>(dweight(j)), p);
    }
  // dp_e: the sum, in choice order, of the coefficients of the choices naming e.
  auto dp_of = [&](int64_t e) {
    double dp = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      if (idx[j] != e) continue;
      const double dw = dweight(j);
      dp += normalize ? dw / s - dot_w / mul_rn(s, s) : dw;
    }
    return dp;
  };
  // Softmax: dlogit_e = p_e (dp_e - sum_m dp_m p_m).
  double dot = 0;
  for (int64_t e = 0; e < experts; ++e) dot += mul_rn(dp_of(e), static_cast<double>(prob(e)));
  for (int64_t e = 0; e < experts; ++e)
    add_dlogit(e, static_cast<float>(mul_rn(static_cast<double>(prob(e)), dp_of(e) - dot)));
}

}  // namespace shardscope::engine::cuda::moe
