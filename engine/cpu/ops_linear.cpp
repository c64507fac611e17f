// Linear layers on OpenBLAS sgemm (row-major). Every sgemm call below has the
// shapes of one of the three products of a linear layer; BLAS dims are int, so
// sizes beyond INT_MAX are rejected rather than truncated.
#include <cblas.h>

#include <climits>
#include <string>
#include <vector>

#include "engine/cpu/check.h"
#include "engine/cpu/ops.h"

namespace shardscope::engine::cpu {

using detail::require;
using detail::require_nonneg;
using detail::require_ptr;

void set_blas_threads(int threads) {
  require(threads >= 1, "set_blas_threads", "threads = " + std::to_string(threads) + " < 1");
  openblas_set_num_threads(threads);
}

namespace {

int blas_dim(const char* fn, const char* name, int64_t value) {
  require_nonneg(fn, name, value);
  require(value <= INT_MAX, fn,
          std::string(name) + " = " + std::to_string(value) + " exceeds the BLAS int range");
  return static_cast<int>(value);
}

struct LinearDims {
  int n, in, out;
};

LinearDims check_linear(const char* fn, int64_t n, int64_t in, int64_t out) {
  return {blas_dim(fn, "n", n), blas_dim(fn, "in", in), blas_dim(fn, "out", out)};
}

}  // namespace

void linear_forward(const float* x, const float* w, const float* bias, float* y, int64_t n,
                    int64_t in, int64_t out, WeightLayout layout) {
  const char* fn = "linear_forward";
  const LinearDims d = check_linear(fn, n, in, out);
  require_ptr(fn, "x", x, n * in);
  require_ptr(fn, "w", w, in * out);
  require_ptr(fn, "y", y, n * out);
  if (d.n == 0 || d.out == 0) return;
  // y starts as the bias rows (beta = 1) or is overwritten (beta = 0).
  if (bias != nullptr) {
    for (int64_t r = 0; r < n; ++r) {
      float* yr = y + r * out;
      for (int64_t j = 0; j < out; ++j) yr[j] = bias[j];
    }
  } else if (d.in == 0) {
    for (int64_t i = 0; i < n * out; ++i) y[i] = 0.0f;
  }
  if (d.in == 0) return;
  const float beta = bias != nullptr ? 1.0f : 0.0f;
  if (layout == WeightLayout::out_in) {
    // y[n, out] = x[n, in] @ W[out, in]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d.n, d.out, d.in, 1.0f, x, d.in, w, d.in,
                beta, y, d.out);
  } else {
    // y[n, out] = x[n, in] @ W[in, out]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d.n, d.out, d.in, 1.0f, x, d.in, w,
                d.out, beta, y, d.out);
  }
}

void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* dbias, int64_t n, int64_t in, int64_t out, WeightLayout layout) {
  const char* fn = "linear_backward";
  const LinearDims d = check_linear(fn, n, in, out);
  require_ptr(fn, "x", x, n * in);
  require_ptr(fn, "w", w, in * out);
  require_ptr(fn, "dy", dy, n * out);
  require_ptr(fn, "dw", dw, in * out);
  if (d.n == 0 || d.out == 0) return;
  if (d.in > 0) {
    if (dx != nullptr) {
      if (layout == WeightLayout::out_in) {
        // dx[n, in] += dy[n, out] @ W[out, in]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d.n, d.in, d.out, 1.0f, dy, d.out, w,
                    d.in, 1.0f, dx, d.in);
      } else {
        // dx[n, in] += dy[n, out] @ W[in, out]^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d.n, d.in, d.out, 1.0f, dy, d.out, w,
                    d.out, 1.0f, dx, d.in);
      }
    }
    if (layout == WeightLayout::out_in) {
      // dW[out, in] += dy[n, out]^T @ x[n, in]
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d.out, d.in, d.n, 1.0f, dy, d.out, x,
                  d.in, 1.0f, dw, d.in);
    } else {
      // dW[in, out] += x[n, in]^T @ dy[n, out]
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d.in, d.out, d.n, 1.0f, x, d.in, dy,
                  d.out, 1.0f, dw, d.out);
    }
  }
  if (dbias != nullptr) {
    // Column sums in double, rows in order: independent of blocking and threads.
    std::vector<double> sum(static_cast<size_t>(out), 0.0);
    for (int64_t r = 0; r < n; ++r) {
      const float* dyr = dy + r * out;
      for (int64_t j = 0; j < out; ++j) sum[j] += static_cast<double>(dyr[j]);
    }
    for (int64_t j = 0; j < out; ++j) dbias[j] += static_cast<float>(sum[j]);
  }
}

}  // namespace shardscope::engine::cpu
