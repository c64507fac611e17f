// LayerNorm and RMSNorm over the last dim c of [n, c] rows (cpu::ops_norm
// twins). One warp per row: row statistics are warp reductions in fp32, the
// row is re-read from L1/L2 for each pass. Backward: dx by the row kernel;
// dw/db by deterministic column sums (fp32 per-chunk partials in the
// workspace, added in chunk order).
#include <cmath>
#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/ops/access.cuh"
#include "engine/cuda/ops/hf_math.h"
#include "engine/cuda/ops/internal.h"
#include "engine/cuda/ops/nvtx_range.h"
#include "engine/cuda/ops/op_checks.h"
#include "engine/cuda/ops/ops.h"
#include "engine/cuda/ops/reduce.cuh"

namespace shardscope::engine::cuda {

using detail::require;
using detail::require_nonneg;
using detail::require_operand;
using detail::require_ptr;
using detail::require_workspace;

namespace {

constexpr int kNormThreads = 256;
constexpr int kRowsPerBlock = kNormThreads / 32;  // one warp per row

// Operands of one norm launch. Forward: x, w, b (layernorm) -> y. Backward:
// x, w, dy -> dx (accumulated). mean is null for RMSNorm.
struct NormOperands {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* b = nullptr;
  const void* dy = nullptr;
  void* out = nullptr;  // y (forward) or dx (backward)
  ElemType tx = ElemType::f32, tw = ElemType::f32, tb = ElemType::f32, tdy = ElemType::f32,
           tout = ElemType::f32;
  float* mean_out = nullptr;  // forward: row statistics written (mean null for RMSNorm)
  float* rstd_out = nullptr;
  const float* mean_in = nullptr;  // backward: the forward's saved statistics
  const float* rstd_in = nullptr;
  int64_t n = 0, c = 0;
  float eps = 0.0f;
  float w_offset = 0.0f;  // RMSNorm: the weight is w_offset + w (hf::rms_weight); 0 for LayerNorm
};

template <typename A, bool kRms>
__global__ void __launch_bounds__(kNormThreads) norm_forward_kernel(NormOperands o) {
  constexpr int W = A::kWidth;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= o.n) return;  // uniform per warp: the warp's shuffles stay complete
  const A ax(o.tx), aw(o.tw), ab(o.tb), ay(o.tout);
  const int64_t base = row * o.c;
  const float inv_c = 1.0f / static_cast<float>(o.c);
  float mean = 0.0f;
  if (!kRms) {
    float sum = 0.0f;
    for (int64_t i = lane * W; i < o.c; i += 32 * W) {
      float v[W];
      ax.load(o.x, base + i, v);
#pragma unroll
      for (int e = 0; e < W; ++e) sum += v[e];
    }
    mean = detail::warp_sum(sum) * inv_c;
  }
  // Two-pass variance (sum of squared deviations), as the CPU op; RMSNorm: mean 0.
  float sq = 0.0f;
  for (int64_t i = lane * W; i < o.c; i += 32 * W) {
    float v[W];
    ax.load(o.x, base + i, v);
#pragma unroll
    for (int e = 0; e < W; ++e) sq += (v[e] - mean) * (v[e] - mean);
  }
  const float rstd = rsqrtf(detail::warp_sum(sq) * inv_c + o.eps);
  if (lane == 0) {
    if (!kRms) o.mean_out[row] = mean;
    o.rstd_out[row] = rstd;
  }
  for (int64_t i = lane * W; i < o.c; i += 32 * W) {
    float v[W], wv[W], bv[W] = {}, y[W];
    ax.load(o.x, base + i, v);
    aw.load(o.w, i, wv);
    if (!kRms) ab.load(o.b, i, bv);
#pragma unroll
    for (int e = 0; e < W; ++e)
      y[e] = kRms ? v[e] * rstd * hf::rms_weight(wv[e], o.w_offset)
                  : (v[e] - mean) * rstd * wv[e] + bv[e];
    ay.store(o.out, base + i, y);
  }
}

// dx += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dy * w,
// xhat = (x - mean) * rstd; RMSNorm drops the mean(dnorm) term (mean 0) and
// its w is hf::rms_weight(w, w_offset).
template <typename A, bool kRms>
__global__ void __launch_bounds__(kNormThreads) norm_backward_kernel(NormOperands o) {
  constexpr int W = A::kWidth;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= o.n) return;  // uniform per warp
  const A ax(o.tx), aw(o.tw), ady(o.tdy), adx(o.tout);
  const int64_t base = row * o.c;
  const float inv_c = 1.0f / static_cast<float>(o.c);
  const float mean = kRms ? 0.0f : o.mean_in[row];
  const float rstd = o.rstd_in[row];
  float sum_dnorm = 0.0f, sum_dnorm_xhat = 0.0f;
  for (int64_t i = lane * W; i < o.c; i += 32 * W) {
    float v[W], wv[W], dyv[W];
    ax.load(o.x, base + i, v);
    aw.load(o.w, i, wv);
    ady.load(o.dy, base + i, dyv);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const float dnorm = dyv[e] * (kRms ? hf::rms_weight(wv[e], o.w_offset) : wv[e]);
      sum_dnorm += dnorm;
      sum_dnorm_xhat += dnorm * ((v[e] - mean) * rstd);
    }
  }
  const float mean_dnorm = kRms ? 0.0f : detail::warp_sum(sum_dnorm) * inv_c;
  const float mean_dnorm_xhat = detail::warp_sum(sum_dnorm_xhat) * inv_c;
  for (int64_t i = lane * W; i < o.c; i += 32 * W) {
    float v[W], wv[W], dyv[W], dx[W];
    ax.load(o.x, base + i, v);
    aw.load(o.w, i, wv);
    ady.load(o.dy, base + i, dyv);
    adx.load(o.out, base + i, dx);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const float xhat = (v[e] - mean) * rstd;
      const float wk = kRms ? hf::rms_weight(wv[e], o.w_offset) : wv[e];
      dx[e] += rstd * (dyv[e] * wk - mean_dnorm - xhat * mean_dnorm_xhat);
    }
    adx.store(o.out, base + i, dx);
  }
}

// Packed path: every row operand of one dtype, 16-byte aligned, c a multiple of the width.
bool norm_packed(const NormOperands& o, bool forward, bool rms) {
  const ElemType t = o.tout;
  const int width = detail::pack_width(t);
  bool same = o.tx == t && o.tw == t;
  if (forward && !rms) same = same && o.tb == t;
  if (!forward) same = same && o.tdy == t;
  return same && o.c % width == 0 && detail::aligned_to(16, {o.x, o.w, o.b, o.dy, o.out});
}

template <bool kRms>
void launch_norm(cudaStream_t s, const NormOperands& o, bool forward, const char* fn) {
  if (o.n == 0) return;
  const auto blocks = static_cast<unsigned>(detail::ceil_div(o.n, kRowsPerBlock));
  detail::with_access(norm_packed(o, forward, kRms), o.tout, [&](auto proto) {
    using A = decltype(proto);
    if (forward)
      norm_forward_kernel<A, kRms><<<blocks, kNormThreads, 0, s>>>(o);
    else
      norm_backward_kernel<A, kRms><<<blocks, kNormThreads, 0, s>>>(o);
  });
  SS_CUDA_CHECK_LAUNCH(fn);
}

void check_norm(const char* fn, int64_t n, int64_t c) {
  require_nonneg(fn, "n", n);
  require(c >= 1, fn, "c = " + std::to_string(c) + " < 1");
}

void check_eps(const char* fn, double eps) {
  require(eps >= 0.0, fn, "eps < 0");
}

void check_weight_offset(const char* fn, double weight_offset) {
  require(std::isfinite(weight_offset), fn,
          "weight_offset = " + std::to_string(weight_offset) + " is not finite");
}

}  // namespace

void layernorm_forward(cudaStream_t s, ConstDevPtr x, ConstDevPtr w, ConstDevPtr b, DevPtr y,
                       float* mean, float* rstd, int64_t n, int64_t c, double eps) {
  const char* fn = "layernorm_forward";
  check_norm(fn, n, c);
  check_eps(fn, eps);
  NormOperands o;
  o.tx = require_operand(fn, "x", x, n * c);
  o.tw = require_operand(fn, "w", w, c);
  o.tb = require_operand(fn, "b", b, c);
  o.tout = require_operand(fn, "y", y, n * c);
  require_ptr(fn, "mean", mean, n);
  require_ptr(fn, "rstd", rstd, n);
  o.x = x.ptr, o.w = w.ptr, o.b = b.ptr, o.out = y.ptr;
  o.mean_out = mean, o.rstd_out = rstd, o.n = n, o.c = c, o.eps = static_cast<float>(eps);
  NvtxRange range(fn);
  launch_norm<false>(s, o, true, fn);
}

size_t layernorm_backward_workspace_bytes(int64_t n, int64_t c) {
  return detail::column_sum_workspace_bytes(n, c, 2);
}

void layernorm_backward(cudaStream_t s, ConstDevPtr x, ConstDevPtr w, const float* mean,
                        const float* rstd, ConstDevPtr dy, DevPtr dx, DevPtr dw, DevPtr db,
                        int64_t n, int64_t c, Workspace ws) {
  const char* fn = "layernorm_backward";
  check_norm(fn, n, c);
  NormOperands o;
  o.tx = require_operand(fn, "x", x, n * c);
  o.tw = require_operand(fn, "w", w, c);
  require_ptr(fn, "mean", mean, n);
  require_ptr(fn, "rstd", rstd, n);
  o.tdy = require_operand(fn, "dy", dy, n * c);
  o.tout = require_operand(fn, "dx", dx, n * c);
  require_operand(fn, "dw", dw, c);
  require_operand(fn, "db", db, c);
  require_workspace(fn, ws, layernorm_backward_workspace_bytes(n, c));
  o.x = x.ptr, o.w = w.ptr, o.dy = dy.ptr, o.out = dx.ptr;
  o.mean_in = mean, o.rstd_in = rstd, o.n = n, o.c = c;
  NvtxRange range(fn);
  launch_norm<false>(s, o, false, fn);
  detail::ColumnSumInput in;
  in.term = detail::ColumnTerm::layernorm_dw_db;
  in.dy = dy.ptr, in.dy_type = o.tdy, in.x = x.ptr, in.x_type = o.tx;
  in.mean = mean, in.rstd = rstd, in.rows = n, in.cols = c;
  detail::launch_column_sum(s, in, dw, db, ws.ptr, fn);
}

void rmsnorm_forward(cudaStream_t s, ConstDevPtr x, ConstDevPtr w, DevPtr y, float* rstd, int64_t n,
                     int64_t c, double eps, double weight_offset) {
  const char* fn = "rmsnorm_forward";
  check_norm(fn, n, c);
  check_eps(fn, eps);
  check_weight_offset(fn, weight_offset);
  NormOperands o;
  o.tx = require_operand(fn, "x", x, n * c);
  o.tw = require_operand(fn, "w", w, c);
  o.tout = require_operand(fn, "y", y, n * c);
  require_ptr(fn, "rstd", rstd, n);
  o.x = x.ptr, o.w = w.ptr, o.out = y.ptr;
  o.rstd_out = rstd, o.n = n, o.c = c, o.eps = static_cast<float>(eps);
  o.w_offset = static_cast<float>(weight_offset);
  NvtxRange range(fn);
  launch_norm<true>(s, o, true, fn);
}

size_t rmsnorm_backward_workspace_bytes(int64_t n, int64_t c) {
  return detail::column_sum_workspace_bytes(n, c, 1);
}

void rmsnorm_backward(cudaStream_t s, ConstDevPtr x, ConstDevPtr w, const float* rstd,
                      ConstDevPtr dy, DevPtr dx, DevPtr dw, int64_t n, int64_t c, Workspace ws,
                      double weight_offset) {
  const char* fn = "rmsnorm_backward";
  check_norm(fn, n, c);
  check_weight_offset(fn, weight_offset);
  NormOperands o;
  o.tx = require_operand(fn, "x", x, n * c);
  o.tw = require_operand(fn, "w", w, c);
  require_ptr(fn, "rstd", rstd, n);
  o.tdy = require_operand(fn, "dy", dy, n * c);
  o.tout = require_operand(fn, "dx", dx, n * c);
  require_operand(fn, "dw", dw, c);
  require_workspace(fn, ws, rmsnorm_backward_workspace_bytes(n, c));
  o.x = x.ptr, o.w = w.ptr, o.dy = dy.ptr, o.out = dx.ptr;
  o.rstd_in = rstd, o.n = n, o.c = c, o.w_offset = static_cast<float>(weight_offset);
  NvtxRange range(fn);
  launch_norm<true>(s, o, false, fn);
  detail::ColumnSumInput in;
  in.term = detail::ColumnTerm::rmsnorm_dw;
  in.dy = dy.ptr, in.dy_type = o.tdy, in.x = x.ptr, in.x_type = o.tx;
  in.rstd = rstd, in.rows = n, in.cols = c;
  detail::launch_column_sum(s, in, dw, DevPtr{}, ws.ptr, fn);
}

}  // namespace shardscope::engine::cuda
