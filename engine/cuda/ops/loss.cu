// Mean cross entropy over rows of logits [n, v] (cpu::ops_loss twin), the
// classes being the first `valid` columns of each row (a padded vocabulary,
// plan/vocab_padding.h: v = Vp is the row stride, valid = V). One block per
// row: one pass for the online max / sum-exp over the valid columns, one pass
// writing the log-probabilities (-inf in the padded columns). Row losses go to the workspace
// (double [n]); one block then sums them in a fixed order, so the loss is the same bits every run.
#include <cfloat>
#include <cmath>
#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/ops/access.cuh"
#include "engine/cuda/ops/nvtx_range.h"
#include "engine/cuda/ops/op_checks.h"
#include "engine/cuda/ops/ops.h"
#include "engine/cuda/ops/reduce.cuh"

namespace shardscope::engine::cuda {

using detail::require;
using detail::require_operand;
using detail::require_ptr;
using detail::require_workspace;

namespace {

constexpr int kLossThreads = 512;
constexpr int kSumThreads = 1024;

template <typename A>
__global__ void __launch_bounds__(kLossThreads)
    cross_entropy_forward_kernel(const void* logits, ElemType tlogits, const int64_t* labels,
                                 void* log_probs, ElemType tlog_probs, int64_t v, int64_t valid,
                                 double* row_loss, int* error_flag) {
  constexpr int W = A::kWidth;
  __shared__ detail::MaxSumExp scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t base = row * v;
  const A al(tlogits), ap(tlog_probs);
  // Starting from -FLT_MAX (not -inf) keeps a -inf logit from producing inf - inf.
  detail::MaxSumExp stats{-FLT_MAX, 0.0f};
  for (int64_t j = static_cast<int64_t>(threadIdx.x) * W; j < v; j += kLossThreads * W) {
    float x[W];
    al.load(logits, base + j, x);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      if (j + e >= valid) break;  // padded columns: outside the softmax
      if (x[e] > stats.max) {
        stats.sum = stats.sum * __expf(stats.max - x[e]) + 1.0f;
        stats.max = x[e];
      } else {
        stats.sum += __expf(x[e] - stats.max);
      }
    }
  }
  stats = detail::block_combine(stats, scratch);
  // log_softmax = x - (max + log sum exp(x - max))
  const float log_norm = stats.max + logf(stats.sum);
  for (int64_t j = static_cast<int64_t>(threadIdx.x) * W; j < v; j += kLossThreads * W) {
    float x[W];
    al.load(logits, base + j, x);
#pragma unroll
    for (int e = 0; e < W; ++e) x[e] = j + e < valid ? x[e] - log_norm : -INFINITY;
    ap.store(log_probs, base + j, x);
  }
  if (threadIdx.x == 0) {
    const int64_t label = labels[row];
    double loss = 0.0;
    if (label < 0 || label >= valid) {
      if (error_flag != nullptr) detail::record_bad_row(error_flag, row);
    } else {
      loss = -static_cast<double>(al.load1(logits, base + label) - log_norm);
    }
    row_loss[row] = loss;
  }
}

// *loss_acc += (sum of row_loss, fixed order) / n; one block of kSumThreads.
__global__ void __launch_bounds__(kSumThreads)
    mean_loss_kernel(const double* row_loss, int64_t n, double* loss_acc) {
  __shared__ double scratch[32];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kSumThreads) sum += row_loss[i];
  sum = detail::block_sum(sum, scratch);
  if (threadIdx.x == 0) *loss_acc += sum / static_cast<double>(n);
}

// dlogits += g * (exp(log_probs) - onehot(label)), g = dloss / n, over the
// first `valid` columns; the padded ones are left as they are.
template <typename A>
__global__ void __launch_bounds__(kLossThreads)
    cross_entropy_backward_kernel(const void* log_probs, ElemType tlog_probs, const int64_t* labels,
                                  float g, void* dlogits, ElemType tdlogits, int64_t v,
                                  int64_t valid) {
  constexpr int W = A::kWidth;
  const int64_t row = blockIdx.x;
  const int64_t base = row * v;
  const int64_t label = labels[row];  // out of range: no one-hot term (the forward flagged it)
  const A ap(tlog_probs), ad(tdlogits);
  for (int64_t j = static_cast<int64_t>(threadIdx.x) * W; j < v; j += kLossThreads * W) {
    float lp[W], d[W];
    ap.load(log_probs, base + j, lp);
    ad.load(dlogits, base + j, d);
#pragma unroll
    for (int e = 0; e < W; ++e)
      if (j + e < valid) d[e] += g * expf(lp[e]) - (j + e == label ? g : 0.0f);
    ad.store(dlogits, base + j, d);
  }
}

// Returns the valid columns (valid < 0: all v), checked in [1, v].
int64_t check_rows(const char* fn, int64_t n, int64_t v, int64_t valid) {
  require(n >= 1, fn, "n = " + std::to_string(n) + " rows: the mean needs at least one");
  require(n <= 0x7fffffff, fn, "n = " + std::to_string(n) + " exceeds the grid's row range");
  require(v >= 1, fn, "v = " + std::to_string(v) + " < 1");
  if (valid < 0) return v;
  require(
      valid >= 1 && valid <= v, fn,
      "valid = " + std::to_string(valid) + " columns outside [1, v = " + std::to_string(v) + "]");
  return valid;
}

bool rows_packed(ElemType a, ElemType b, int64_t v, const void* pa, const void* pb) {
  return a == b && v % detail::pack_width(a) == 0 && detail::aligned_to(16, {pa, pb});
}

}  // namespace

size_t cross_entropy_forward_workspace_bytes(int64_t n, int64_t /*v*/) {
  return n > 0 ? static_cast<size_t>(n) * sizeof(double) : 0;
}

void cross_entropy_forward(cudaStream_t s, ConstDevPtr logits, const int64_t* labels,
                           DevPtr log_probs, int64_t n, int64_t v, double* loss_acc,
                           int32_t* error_flag, Workspace ws, int64_t valid) {
  const char* fn = "cross_entropy_forward";
  const int64_t cols = check_rows(fn, n, v, valid);
  const ElemType tl = require_operand(fn, "logits", logits, n * v);
  require_ptr(fn, "labels", labels, n);
  const ElemType tp = require_operand(fn, "log_probs", log_probs, n * v);
  require_ptr(fn, "loss_acc", loss_acc, 1);
  require_workspace(fn, ws, cross_entropy_forward_workspace_bytes(n, v));
  NvtxRange range(fn);
  auto* row_loss = static_cast<double*>(ws.ptr);
  detail::with_access(rows_packed(tl, tp, v, logits.ptr, log_probs.ptr), tl, [&](auto proto) {
    using A = decltype(proto);
    cross_entropy_forward_kernel<A><<<static_cast<unsigned>(n), kLossThreads, 0, s>>>(
        logits.ptr, tl, labels, log_probs.ptr, tp, v, cols, row_loss, error_flag);
  });
  SS_CUDA_CHECK_LAUNCH(fn);
  mean_loss_kernel<<<1, kSumThreads, 0, s>>>(row_loss, n, loss_acc);
  SS_CUDA_CHECK_LAUNCH(fn);
}

void cross_entropy_backward(cudaStream_t s, ConstDevPtr log_probs, const int64_t* labels,
                            float dloss, DevPtr dlogits, int64_t n, int64_t v, int64_t valid) {
  const char* fn = "cross_entropy_backward";
  const int64_t cols = check_rows(fn, n, v, valid);
  const ElemType tp = require_operand(fn, "log_probs", log_probs, n * v);
  require_ptr(fn, "labels", labels, n);
  const ElemType td = require_operand(fn, "dlogits", dlogits, n * v);
  NvtxRange range(fn);
  const float g = dloss / static_cast<float>(n);
  detail::with_access(rows_packed(tp, td, v, log_probs.ptr, dlogits.ptr), td, [&](auto proto) {
    using A = decltype(proto);
    cross_entropy_backward_kernel<A><<<static_cast<unsigned>(n), kLossThreads, 0, s>>>(
        log_probs.ptr, tp, labels, g, dlogits.ptr, td, v, cols);
  });
  SS_CUDA_CHECK_LAUNCH(fn);
}

}  // namespace shardscope::engine::cuda
