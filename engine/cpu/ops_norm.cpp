// LayerNorm and RMSNorm over the last dim C of [N, C] rows. Row statistics are
// reduced in double; the parameter gradients (dw, db) are summed over rows in
// double, rows in order, and added once: deterministic for any N.
#include <cmath>
#include <initializer_list>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cpu/check.h"
#include "engine/cpu/ops.h"

namespace shardscope::engine::cpu {

using detail::require;
using detail::require_nonneg;
using detail::require_ptr;

namespace {

void check_norm(const char* fn, int64_t n, int64_t c) {
  require_nonneg(fn, "n", n);
  require(c >= 1, fn, "c = " + std::to_string(c) + " < 1");
}

}  // namespace

void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                       float* rstd, int64_t n, int64_t c, double eps) {
  const char* fn = "layernorm_forward";
  check_norm(fn, n, c);
  require(eps >= 0.0, fn, "eps < 0");
  for (const auto& [name, ptr, count] :
       {std::tuple<const char*, const void*, int64_t>{"x", x, n * c},
        {"w", w, c},
        {"b", b, c},
        {"y", y, n * c},
        {"mean", mean, n},
        {"rstd", rstd, n}})
    require_ptr(fn, name, ptr, count);
  const double inv_c = 1.0 / static_cast<double>(c);
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * c;
    float* yr = y + r * c;
    double sum = 0.0;
    for (int64_t i = 0; i < c; ++i) sum += xr[i];
    const double mu = sum * inv_c;
    double sq = 0.0;  // two-pass (biased) variance: no cancellation for large means
    for (int64_t i = 0; i < c; ++i) {
      const double dev = xr[i] - mu;
      sq += dev * dev;
    }
    const float m = static_cast<float>(mu);
    const float s = static_cast<float>(1.0 / std::sqrt(sq * inv_c + eps));
    mean[r] = m;
    rstd[r] = s;
    for (int64_t i = 0; i < c; ++i) yr[i] = (xr[i] - m) * s * w[i] + b[i];
  }
}

void layernorm_backward(const float* x, const float* w, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dw, float* db, int64_t n, int64_t c) {
  const char* fn = "layernorm_backward";
  check_norm(fn, n, c);
  for (const auto& [name, ptr, count] :
       {std::tuple<const char*, const void*, int64_t>{"x", x, n * c},
        {"w", w, c},
        {"mean", mean, n},
        {"rstd", rstd, n},
        {"dy", dy, n * c},
        {"dx", dx, n * c},
        {"dw", dw, c},
        {"db", db, c}})
    require_ptr(fn, name, ptr, count);
  const float inv_c = 1.0f / static_cast<float>(c);
  std::vector<double> dw_sum(static_cast<size_t>(c), 0.0), db_sum(static_cast<size_t>(c), 0.0);
  std::vector<float> xhat(static_cast<size_t>(c));
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * c;
    const float* dyr = dy + r * c;
    float* dxr = dx + r * c;
    const float m = mean[r], s = rstd[r];
    // dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dy * w.
    double sum_dnorm = 0.0, sum_dnorm_xhat = 0.0;
    for (int64_t i = 0; i < c; ++i) {
      xhat[i] = (xr[i] - m) * s;
      const float dnorm = dyr[i] * w[i];
      sum_dnorm += dnorm;
      sum_dnorm_xhat += static_cast<double>(dnorm) * xhat[i];
      dw_sum[i] += static_cast<double>(dyr[i]) * xhat[i];
      db_sum[i] += dyr[i];
    }
    const float mean_dnorm = static_cast<float>(sum_dnorm) * inv_c;
    const float mean_dnorm_xhat = static_cast<float>(sum_dnorm_xhat) * inv_c;
    for (int64_t i = 0; i < c; ++i)
      dxr[i] += s * (dyr[i] * w[i] - mean_dnorm - xhat[i] * mean_dnorm_xhat);
  }
  for (int64_t i = 0; i < c; ++i) {
    dw[i] += static_cast<float>(dw_sum[i]);
    db[i] += static_cast<float>(db_sum[i]);
  }
}

void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t n, int64_t c,
                     double eps, double weight_offset) {
  const char* fn = "rmsnorm_forward";
  check_norm(fn, n, c);
  require(eps >= 0.0, fn, "eps < 0");
  for (const auto& [name, ptr, count] :
       {std::tuple<const char*, const void*, int64_t>{"x", x, n * c},
        {"w", w, c},
        {"y", y, n * c},
        {"rstd", rstd, n}})
    require_ptr(fn, name, ptr, count);
  const double inv_c = 1.0 / static_cast<double>(c);
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * c;
    float* yr = y + r * c;
    double sq = 0.0;
    for (int64_t i = 0; i < c; ++i) sq += static_cast<double>(xr[i]) * xr[i];
    const float s = static_cast<float>(1.0 / std::sqrt(sq * inv_c + eps));
    rstd[r] = s;
    if (weight_offset == 0.0) {
      for (int64_t i = 0; i < c; ++i) yr[i] = xr[i] * s * w[i];
    } else {
      const float off = static_cast<float>(weight_offset);
      for (int64_t i = 0; i < c; ++i) yr[i] = xr[i] * s * (off + w[i]);
    }
  }
}

void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                      float* dw, int64_t n, int64_t c, double weight_offset) {
  const char* fn = "rmsnorm_backward";
  check_norm(fn, n, c);
  for (const auto& [name, ptr, count] :
       {std::tuple<const char*, const void*, int64_t>{"x", x, n * c},
        {"w", w, c},
        {"rstd", rstd, n},
        {"dy", dy, n * c},
        {"dx", dx, n * c},
        {"dw", dw, c}})
    require_ptr(fn, name, ptr, count);
  const float inv_c = 1.0f / static_cast<float>(c);
  std::vector<double> dw_sum(static_cast<size_t>(c), 0.0);
  // The effective weight (weight_offset + w); dw is unchanged by the offset.
  std::vector<float> weff(w, w + c);
  if (weight_offset != 0.0)
    for (float& v : weff) v += static_cast<float>(weight_offset);
  w = weff.data();
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * c;
    const float* dyr = dy + r * c;
    float* dxr = dx + r * c;
    const float s = rstd[r];
    // dx = rstd * (dnorm - xhat * mean(dnorm * xhat)), xhat = x * rstd, dnorm = dy * w.
    double sum_dnorm_xhat = 0.0;
    for (int64_t i = 0; i < c; ++i) {
      const float xhat = xr[i] * s;
      sum_dnorm_xhat += static_cast<double>(dyr[i] * w[i]) * xhat;
      dw_sum[i] += static_cast<double>(dyr[i]) * xhat;
    }
    const float mean_dnorm_xhat = static_cast<float>(sum_dnorm_xhat) * inv_c;
    for (int64_t i = 0; i < c; ++i) dxr[i] += s * (dyr[i] * w[i] - xr[i] * s * mean_dnorm_xhat);
  }
  for (int64_t i = 0; i < c; ++i) dw[i] += static_cast<float>(dw_sum[i]);
}

}  // namespace shardscope::engine::cpu
