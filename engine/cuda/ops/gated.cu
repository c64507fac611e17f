// Gated MLP activations (SiLU, GELU erf and tanh forms) over strided gate/up
// rows, the constant scale and tanh soft-capping: the cpu::ops_gated twins
// (Gemma's GeGLU and normalizer, Gemma 2's final logit soft-capping, Phi-3's
// packed gate_up). The per-element math and the strided index are
// hf_math.h's, which the host tests check against the CPU ops.
#include <cmath>
#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/ops/access.cuh"
#include "engine/cuda/ops/elementwise.cuh"
#include "engine/cuda/ops/hf_math.h"
#include "engine/cuda/ops/nvtx_range.h"
#include "engine/cuda/ops/op_checks.h"
#include "engine/cuda/ops/ops.h"

namespace shardscope::engine::cuda {

using detail::ElementwiseOperands;
using detail::launch_elementwise;
using detail::require;
using detail::require_nonneg;
using detail::require_operand;

namespace {

constexpr int kGatedThreads = 256;

// Operands of one gated launch over a dense [rows, width] y / dy; gate, up,
// dgate and dup are read (and written) at hf::strided_offset. Forward: gate,
// up -> y. Backward: gate, up, dy -> dgate, dup (accumulated).
struct GatedOperands {
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* dy = nullptr;
  void* y = nullptr;
  void* dgate = nullptr;
  void* dup = nullptr;
  ElemType tg = ElemType::f32, tu = ElemType::f32, tdy = ElemType::f32, ty = ElemType::f32,
           tdg = ElemType::f32, tdu = ElemType::f32;
  int64_t rows = 0, width = 0, stride = 0;
  cpu::GateActivation act = cpu::GateActivation::silu;
};

// One thread per pack of W consecutive elements of a row (width % W == 0 on
// the packed path, so a pack never straddles two rows).
template <typename A>
__global__ void __launch_bounds__(kGatedThreads) gated_forward_kernel(GatedOperands o) {
  constexpr int W = A::kWidth;
  const int64_t packs = o.rows * o.width / W;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const A ag(o.tg), au(o.tu), ay(o.ty);
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += step) {
    const int64_t i = p * W;
    const int64_t at = hf::strided_offset(i, o.width, o.stride);
    float g[W], u[W], y[W];
    ag.load(o.gate, at, g);
    au.load(o.up, at, u);
#pragma unroll
    for (int e = 0; e < W; ++e) y[e] = hf::gated_value(g[e], u[e], o.act);
    ay.store(o.y, i, y);
  }
}

template <typename A>
__global__ void __launch_bounds__(kGatedThreads) gated_backward_kernel(GatedOperands o) {
  constexpr int W = A::kWidth;
  const int64_t packs = o.rows * o.width / W;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const A ag(o.tg), au(o.tu), ady(o.tdy), adg(o.tdg), adu(o.tdu);
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += step) {
    const int64_t i = p * W;
    const int64_t at = hf::strided_offset(i, o.width, o.stride);
    float g[W], u[W], d[W], dg[W], du[W];
    ag.load(o.gate, at, g);
    au.load(o.up, at, u);
    ady.load(o.dy, i, d);
    adg.load(o.dgate, at, dg);
    adu.load(o.dup, at, du);
#pragma unroll
    for (int e = 0; e < W; ++e) hf::gated_backward_element(g[e], u[e], d[e], o.act, dg[e], du[e]);
    adg.store(o.dgate, at, dg);
    adu.store(o.dup, at, du);
  }
}

// Elements a strided [rows, width] operand spans.
int64_t span(int64_t rows, int64_t width, int64_t stride) {
  return rows == 0 || width == 0 ? 0 : (rows - 1) * stride + width;
}

void check_gated(const char* fn, int64_t rows, int64_t width, int64_t stride) {
  require_nonneg(fn, "rows", rows);
  require_nonneg(fn, "width", width);
  require(stride >= width, fn,
          "stride " + std::to_string(stride) + " < width " + std::to_string(width));
}

// Packed path: every operand of y's dtype, 16-byte aligned, and rows of a
// whole number of packs (width and stride multiples of the pack width).
void launch_gated(cudaStream_t s, const GatedOperands& o, bool forward, const char* fn) {
  const int64_t n = o.rows * o.width;
  if (n == 0) return;
  const ElemType common = forward ? o.ty : o.tdy;
  const int width = detail::pack_width(common);
  bool same = o.tg == common && o.tu == common;
  if (!forward) same = same && o.tdg == common && o.tdu == common;
  const bool packed = same && o.width % width == 0 && o.stride % width == 0 &&
                      detail::aligned_to(16, {o.gate, o.up, o.dy, o.y, o.dgate, o.dup});
  detail::with_access(packed, common, [&](auto proto) {
    using A = decltype(proto);
    const unsigned blocks = detail::grid_for(n / A::kWidth, kGatedThreads);
    if (forward)
      gated_forward_kernel<A><<<blocks, kGatedThreads, 0, s>>>(o);
    else
      gated_backward_kernel<A><<<blocks, kGatedThreads, 0, s>>>(o);
  });
  SS_CUDA_CHECK_LAUNCH(fn);
}

struct ScaleForward {  // y = x * scale
  float scale;
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0] * scale; }
};

struct ScaleBackward {  // in = dy; dx += dy * scale
  float scale;
  __device__ void operator()(const float* in, float* out) const { out[0] += in[0] * scale; }
};

struct SoftcapForward {  // in = x; out = (y, th)
  float cap;
  __device__ void operator()(const float* in, float* out) const {
    hf::softcap_element(in[0], cap, out[0], out[1]);
  }
};

struct SoftcapBackward {  // in = (th, dy); dx += dy * (1 - th^2)
  __device__ void operator()(const float* in, float* out) const {
    out[0] += in[1] * hf::softcap_slope(in[0]);
  }
};

ElementwiseOperands unary(ConstDevPtr x, ElemType tx, DevPtr y, ElemType ty) {
  ElementwiseOperands ops;
  ops.in[0] = x.ptr;
  ops.in_type[0] = tx;
  ops.out[0] = y.ptr;
  ops.out_type[0] = ty;
  return ops;
}

}  // namespace

void gated_forward(cudaStream_t s, ConstDevPtr gate, ConstDevPtr up, DevPtr y, int64_t rows,
                   int64_t width, int64_t stride, cpu::GateActivation act) {
  const char* fn = "gated_forward";
  check_gated(fn, rows, width, stride);
  GatedOperands o;
  o.tg = require_operand(fn, "gate", gate, span(rows, width, stride));
  o.tu = require_operand(fn, "up", up, span(rows, width, stride));
  o.ty = require_operand(fn, "y", y, rows * width);
  o.gate = gate.ptr, o.up = up.ptr, o.y = y.ptr;
  o.rows = rows, o.width = width, o.stride = stride, o.act = act;
  NvtxRange range(fn);
  launch_gated(s, o, true, fn);
}

void gated_backward(cudaStream_t s, ConstDevPtr gate, ConstDevPtr up, ConstDevPtr dy, DevPtr dgate,
                    DevPtr dup, int64_t rows, int64_t width, int64_t stride,
                    cpu::GateActivation act) {
  const char* fn = "gated_backward";
  check_gated(fn, rows, width, stride);
  const int64_t n = span(rows, width, stride);
  GatedOperands o;
  o.tg = require_operand(fn, "gate", gate, n);
  o.tu = require_operand(fn, "up", up, n);
  o.tdy = require_operand(fn, "dy", dy, rows * width);
  o.tdg = require_operand(fn, "dgate", dgate, n);
  o.tdu = require_operand(fn, "dup", dup, n);
  o.gate = gate.ptr, o.up = up.ptr, o.dy = dy.ptr, o.dgate = dgate.ptr, o.dup = dup.ptr;
  o.rows = rows, o.width = width, o.stride = stride, o.act = act;
  NvtxRange range(fn);
  launch_gated(s, o, false, fn);
}

void scale_forward(cudaStream_t s, ConstDevPtr x, DevPtr y, int64_t n, float scale) {
  const char* fn = "scale_forward";
  require_nonneg(fn, "n", n);
  const ElemType tx = require_operand(fn, "x", x, n);
  const ElemType ty = require_operand(fn, "y", y, n);
  NvtxRange range(fn);
  launch_elementwise<1, 1, false>(s, unary(x, tx, y, ty), n, ScaleForward{scale}, fn);
}

void scale_backward(cudaStream_t s, ConstDevPtr dy, DevPtr dx, int64_t n, float scale) {
  const char* fn = "scale_backward";
  require_nonneg(fn, "n", n);
  const ElemType tdy = require_operand(fn, "dy", dy, n);
  const ElemType tdx = require_operand(fn, "dx", dx, n);
  NvtxRange range(fn);
  launch_elementwise<1, 1, true>(s, unary(dy, tdy, dx, tdx), n, ScaleBackward{scale}, fn);
}

void softcap_forward(cudaStream_t s, ConstDevPtr x, DevPtr y, DevPtr th, int64_t n, float cap) {
  const char* fn = "softcap_forward";
  require_nonneg(fn, "n", n);
  require(cap > 0.0f && std::isfinite(cap), fn,
          "cap = " + std::to_string(cap) + " must be finite and > 0");
  ElementwiseOperands ops =
      unary(x, require_operand(fn, "x", x, n), y, require_operand(fn, "y", y, n));
  ops.out[1] = th.ptr;
  ops.out_type[1] = require_operand(fn, "th", th, n);
  NvtxRange range(fn);
  launch_elementwise<1, 2, false>(s, ops, n, SoftcapForward{cap}, fn);
}

void softcap_backward(cudaStream_t s, ConstDevPtr th, ConstDevPtr dy, DevPtr dx, int64_t n) {
  const char* fn = "softcap_backward";
  require_nonneg(fn, "n", n);
  ElementwiseOperands ops =
      unary(th, require_operand(fn, "th", th, n), dx, require_operand(fn, "dx", dx, n));
  ops.in[1] = dy.ptr;
  ops.in_type[1] = require_operand(fn, "dy", dy, n);
  NvtxRange range(fn);
  launch_elementwise<2, 1, true>(s, ops, n, SoftcapBackward{}, fn);
}

}  // namespace shardscope::engine::cuda
