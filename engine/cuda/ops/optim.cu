// The optimizer step and its numerics (cpu::optim twins): deterministic
// squared norms, inf/NaN check, clip factor, fused AdamW and SGD. The update
// kernels evaluate the CPU formulas operation by operation with explicitly
// rounded intrinsics (__fmul_rn, __fadd_rn, ...: no FMA contraction), so an
// fp32 step gives the same bits as cpu::adamw_step / sgd_step.
#include <cmath>
#include <string>

#include "engine/cpu/optim.h"
#include "engine/cuda/check.h"
#include "engine/cuda/ops/access.cuh"
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

constexpr int kThreads = 256;
constexpr int64_t kNormElemsPerBlock = 4096;  // target elements per block
constexpr int64_t kNormMaxBlocks = 1024;      // = threads of the final pass

// Blocks of the squared-norm pass: a function of n only (the summation order
// depends on it, and the workspace is sized from it).
int64_t norm_blocks(int64_t n) {
  const int64_t blocks = detail::ceil_div(n, kNormElemsPerBlock);
  return blocks < 1 ? 1 : (blocks > kNormMaxBlocks ? kNormMaxBlocks : blocks);
}

// partial[block] = sum of x^2 over the packs p = block * 256 + thread + k * (blocks * 256),
// each thread in increasing k, then the block's fixed-order tree.
template <typename A>
__global__ void __launch_bounds__(kThreads)
    squared_norm_partial_kernel(const void* x, ElemType tx, int64_t n, double* partial) {
  constexpr int W = A::kWidth;
  __shared__ double scratch[32];
  const A ax(tx);
  const int64_t packs = n / W;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  double sum = 0.0;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; p < packs;
       p += stride) {
    float v[W];
    ax.load(x, p * W, v);
#pragma unroll
    for (int e = 0; e < W; ++e) sum += static_cast<double>(v[e]) * v[e];
  }
  sum = detail::block_sum(sum, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// *acc += sum of partial[0..blocks) (blocks <= kNormMaxBlocks), fixed order.
__global__ void __launch_bounds__(kNormMaxBlocks)
    squared_norm_final_kernel(const double* partial, int64_t blocks, double* acc) {
  __shared__ double scratch[32];
  double v = threadIdx.x < blocks ? partial[threadIdx.x] : 0.0;
  v = detail::block_sum(v, scratch);
  if (threadIdx.x == 0) *acc += v;
}

template <typename A>
__global__ void __launch_bounds__(kThreads)
    inf_check_kernel(const void* x, ElemType tx, int64_t n, float* flag) {
  constexpr int W = A::kWidth;
  const A ax(tx);
  const int64_t packs = n / W;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  bool special = false;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; p < packs;
       p += stride) {
    float v[W];
    ax.load(x, p * W, v);
#pragma unroll
    for (int e = 0; e < W; ++e) special = special || !isfinite(v[e]);
  }
  // Every lane reaches the vote (no early exit above); one store per warp.
  if (__any_sync(detail::kFullMask, special) && threadIdx.x % 32 == 0) *flag = 1.0f;
}

__global__ void clip_factor_kernel(const double* norm_sq, double max_norm, float* factor) {
  // cpu::clip_factor on the device (same epsilon, same NaN behaviour).
  const double coef = max_norm / (sqrt(*norm_sq) + cpu::kClipNormEps);
  *factor = static_cast<float>(1.0 < coef ? 1.0 : coef);
}

// Scalars of one AdamW step, combined in double on the host as cpu::adamw_step does.
struct AdamWScalars {
  float decay, w1, beta2, w2, neg_step_size, bias_correction2_sqrt, eps;
};

template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

// Loads g[i..i+4) (kVec) or g[i] into gv; returns the count loaded.
template <typename T, bool kVec>
__device__ inline void load_grad(const T* g, int64_t i, float (&gv)[4]) {
  if (kVec) {
    const Quad<T> q = *reinterpret_cast<const Quad<T>*>(g + i);
#pragma unroll
    for (int e = 0; e < 4; ++e) gv[e] = Elem<T>::load(q.v, e);
  } else {
    gv[0] = Elem<T>::load(g, i);
  }
}

__device__ inline float scale_grad(float g, const float* g_factor) {
  return g_factor != nullptr ? __fmul_rn(g, *g_factor) : g;
}

__device__ inline void adamw_element(float& p, float g, float& m, float& v, const AdamWScalars& h) {
  p = __fmul_rn(p, h.decay);
  // torch.lerp(m, g, w1): m + w1 (g - m) for w1 < 0.5, else g - (g - m)(1 - w1).
  m = h.w1 < 0.5f ? __fadd_rn(m, __fmul_rn(h.w1, __fsub_rn(g, m)))
                  : __fsub_rn(g, __fmul_rn(__fsub_rn(g, m), __fsub_rn(1.0f, h.w1)));
  v = __fadd_rn(__fmul_rn(v, h.beta2), __fmul_rn(__fmul_rn(h.w2, g), g));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), h.bias_correction2_sqrt), h.eps);
  p = __fadd_rn(p, __fmul_rn(h.neg_step_size, __fdiv_rn(m, denom)));
}

// kVec: 4 elements per thread with 16-byte p/m/v and 4-element g loads (host
// checked alignment and n % 4 == 0); else one element per thread.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(float* p, const T* g, float* m, float* v, int64_t n, AdamWScalars h,
                 const float* g_factor, const float* skip) {
  if (skip != nullptr && *skip != 0.0f) return;
  constexpr int W = kVec ? 4 : 1;
  const int64_t items = n / W;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; k < items;
       k += stride) {
    const int64_t i = k * W;
    float gv[4];
    load_grad<T, kVec>(g, i, gv);
    if (kVec) {
      float4 pv = *reinterpret_cast<float4*>(p + i);
      float4 mv = *reinterpret_cast<float4*>(m + i);
      float4 vv = *reinterpret_cast<float4*>(v + i);
      adamw_element(pv.x, scale_grad(gv[0], g_factor), mv.x, vv.x, h);
      adamw_element(pv.y, scale_grad(gv[1], g_factor), mv.y, vv.y, h);
      adamw_element(pv.z, scale_grad(gv[2], g_factor), mv.z, vv.z, h);
      adamw_element(pv.w, scale_grad(gv[3], g_factor), mv.w, vv.w, h);
      *reinterpret_cast<float4*>(p + i) = pv;
      *reinterpret_cast<float4*>(m + i) = mv;
      *reinterpret_cast<float4*>(v + i) = vv;
    } else {
      adamw_element(p[i], scale_grad(gv[0], g_factor), m[i], v[i], h);
    }
  }
}

struct SgdScalars {
  float wd, momentum, neg_lr;
  bool has_wd, has_momentum, first_step;
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    sgd_kernel(float* p, const T* g, float* buf, int64_t n, SgdScalars h, const float* g_factor,
               const float* skip) {
  if (skip != nullptr && *skip != 0.0f) return;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const float gi = scale_grad(Elem<T>::load(g, i), g_factor);
    const float pi = p[i];
    float d = h.has_wd ? __fadd_rn(gi, __fmul_rn(h.wd, pi)) : gi;
    if (h.has_momentum) {
      d = h.first_step ? d : __fadd_rn(__fmul_rn(buf[i], h.momentum), d);
      buf[i] = d;
    }
    p[i] = __fadd_rn(pi, __fmul_rn(h.neg_lr, d));
  }
}

bool packed_1d(ElemType t, int64_t n, const void* x) {
  return n % detail::pack_width(t) == 0 && detail::aligned_to(16, {x});
}

void check_step(const char* fn, int64_t n, int64_t step) {
  require_nonneg(fn, "n", n);
  require(step >= 1, fn, "step = " + std::to_string(step) + " < 1 (steps are 1-based)");
}

}  // namespace

size_t squared_norm_workspace_bytes(int64_t n) {
  return n > 0 ? static_cast<size_t>(norm_blocks(n)) * sizeof(double) : 0;
}

void squared_norm_accumulate(cudaStream_t s, ConstDevPtr x, int64_t n, double* acc, Workspace ws) {
  const char* fn = "squared_norm_accumulate";
  require_nonneg(fn, "n", n);
  const ElemType t = require_operand(fn, "x", x, n);
  require_ptr(fn, "acc", acc, 1);
  require_workspace(fn, ws, squared_norm_workspace_bytes(n));
  NvtxRange range(fn);
  if (n == 0) return;
  const int64_t blocks = norm_blocks(n);
  auto* partial = static_cast<double*>(ws.ptr);
  detail::with_access(packed_1d(t, n, x.ptr), t, [&](auto proto) {
    using A = decltype(proto);
    squared_norm_partial_kernel<A>
        <<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(x.ptr, t, n, partial);
  });
  SS_CUDA_CHECK_LAUNCH(fn);
  squared_norm_final_kernel<<<1, kNormMaxBlocks, 0, s>>>(partial, blocks, acc);
  SS_CUDA_CHECK_LAUNCH(fn);
}

void inf_check(cudaStream_t s, ConstDevPtr x, int64_t n, float* flag) {
  const char* fn = "inf_check";
  require_nonneg(fn, "n", n);
  const ElemType t = require_operand(fn, "x", x, n);
  require_ptr(fn, "flag", flag, 1);
  NvtxRange range(fn);
  if (n == 0) return;
  const bool packed = packed_1d(t, n, x.ptr);
  detail::with_access(packed, t, [&](auto proto) {
    using A = decltype(proto);
    inf_check_kernel<A>
        <<<detail::grid_for(n / A::kWidth, kThreads), kThreads, 0, s>>>(x.ptr, t, n, flag);
  });
  SS_CUDA_CHECK_LAUNCH(fn);
}

void clip_factor(cudaStream_t s, const double* norm_sq, double max_norm, float* factor) {
  const char* fn = "clip_factor";
  require_ptr(fn, "norm_sq", norm_sq, 1);
  require_ptr(fn, "factor", factor, 1);
  require(std::isfinite(max_norm) && max_norm > 0.0, fn,
          "max_norm = " + std::to_string(max_norm) + " is not a positive finite number");
  NvtxRange range(fn);
  clip_factor_kernel<<<1, 1, 0, s>>>(norm_sq, max_norm, factor);
  SS_CUDA_CHECK_LAUNCH(fn);
}

void adamw_step(cudaStream_t s, float* p, ConstDevPtr g, float* m, float* v, int64_t n,
                const AdamWParams& h, int64_t step, const float* g_factor, const float* skip) {
  const char* fn = "adamw_step";
  check_step(fn, n, step);
  require(h.beta1 >= 0.0 && h.beta1 < 1.0, fn,
          "beta1 = " + std::to_string(h.beta1) + " outside [0, 1)");
  require(h.beta2 >= 0.0 && h.beta2 < 1.0, fn,
          "beta2 = " + std::to_string(h.beta2) + " outside [0, 1)");
  require(h.eps >= 0.0, fn, "eps < 0");
  require_ptr(fn, "p", p, n);
  const ElemType tg = require_operand(fn, "g", g, n);
  require_ptr(fn, "m", m, n);
  require_ptr(fn, "v", v, n);
  NvtxRange range(fn);
  if (n == 0) return;
  // Hyperparameters combined in double, then rounded to float (cpu::adamw_step).
  const auto k = static_cast<double>(step);
  AdamWScalars sc{};
  sc.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  sc.w1 = static_cast<float>(1.0 - h.beta1);
  sc.beta2 = static_cast<float>(h.beta2);
  sc.w2 = static_cast<float>(1.0 - h.beta2);
  sc.neg_step_size = static_cast<float>(-(h.lr / (1.0 - std::pow(h.beta1, k))));
  sc.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(h.beta2, k)));
  sc.eps = static_cast<float>(h.eps);
  const bool vec = n % 4 == 0 && detail::aligned_to(16, {p, m, v}) &&
                   detail::aligned_to(4 * static_cast<size_t>(plan::dtype_bytes(g.dt)), {g.ptr});
  dispatch_elem(tg, [&](auto tag) {
    using T = decltype(tag);
    const T* gp = static_cast<const T*>(g.ptr);
    if (vec)
      adamw_kernel<T, true><<<detail::grid_for(n / 4, kThreads), kThreads, 0, s>>>(
          p, gp, m, v, n, sc, g_factor, skip);
    else
      adamw_kernel<T, false>
          <<<detail::grid_for(n, kThreads), kThreads, 0, s>>>(p, gp, m, v, n, sc, g_factor, skip);
  });
  SS_CUDA_CHECK_LAUNCH(fn);
}

void sgd_step(cudaStream_t s, float* p, ConstDevPtr g, float* buf, int64_t n, const SgdParams& h,
              int64_t step, const float* g_factor, const float* skip) {
  const char* fn = "sgd_step";
  check_step(fn, n, step);
  require(h.momentum >= 0.0, fn, "momentum = " + std::to_string(h.momentum) + " < 0");
  require_ptr(fn, "p", p, n);
  const ElemType tg = require_operand(fn, "g", g, n);
  if (h.momentum != 0.0) require_ptr(fn, "buf (momentum > 0)", buf, n);
  NvtxRange range(fn);
  if (n == 0) return;
  SgdScalars sc{};
  sc.wd = static_cast<float>(h.weight_decay);
  sc.momentum = static_cast<float>(h.momentum);
  sc.neg_lr = static_cast<float>(-h.lr);
  sc.has_wd = h.weight_decay != 0.0;
  sc.has_momentum = h.momentum != 0.0;
  sc.first_step = step == 1;
  dispatch_elem(tg, [&](auto tag) {
    using T = decltype(tag);
    sgd_kernel<T><<<detail::grid_for(n, kThreads), kThreads, 0, s>>>(
        p, static_cast<const T*>(g.ptr), buf, n, sc, g_factor, skip);
  });
  SS_CUDA_CHECK_LAUNCH(fn);
}

}  // namespace shardscope::engine::cuda
