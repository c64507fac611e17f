// Elementwise activations and the residual add (cpu::ops_pointwise twins):
// same formulas in fp32; backward ops accumulate into their gradients.
#include <string>

#include "engine/cuda/ops/elementwise.cuh"
#include "engine/cuda/ops/internal.h"
#include "engine/cuda/ops/nvtx_range.h"
#include "engine/cuda/ops/op_checks.h"
#include "engine/cuda/ops/ops.h"

namespace shardscope::engine::cuda {

using detail::ElementwiseOperands;
using detail::launch_elementwise;
using detail::require;
using detail::require_nonneg;
using detail::require_operand;
using detail::require_workspace;

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.3989422804014327f;  // 1 / sqrt(2 pi)

struct GeluForward {  // x[0] = x; y[0] = gelu(x)
  bool tanh_approximation;
  __device__ void operator()(const float* in, float* out) const {
    const float v = in[0];
    if (tanh_approximation) {
      const float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
      out[0] = 0.5f * v * (1.0f + tanhf(u));
    } else {
      out[0] = 0.5f * v * (1.0f + erff(v * kInvSqrt2));
    }
  }
};

struct GeluBackward {  // in = (x, dy); out[0] = dx += dy * gelu'(x)
  bool tanh_approximation;
  __device__ void operator()(const float* in, float* out) const {
    const float v = in[0];
    float slope;
    if (tanh_approximation) {
      const float th = tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
      const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
      slope = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
    } else {
      const float cdf = 0.5f * (1.0f + erff(v * kInvSqrt2));
      const float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
      slope = cdf + v * pdf;
    }
    out[0] += in[1] * slope;
  }
};

struct ReluForward {  // NaN propagates (NaN < 0 is false), as torch.relu
  __device__ void operator()(const float* in, float* out) const {
    out[0] = in[0] < 0.0f ? 0.0f : in[0];
  }
};

struct ReluBackward {  // in = (y, dy): gradient where the output is positive
  __device__ void operator()(const float* in, float* out) const {
    out[0] += in[0] > 0.0f ? in[1] : 0.0f;
  }
};

struct SwigluForward {  // in = (gate, up); y = silu(gate) * up
  __device__ void operator()(const float* in, float* out) const {
    const float g = in[0];
    const float sig = 1.0f / (1.0f + expf(-g));
    out[0] = g * sig * in[1];
  }
};

struct SwigluBackward {  // in = (gate, up, dy); out = (dgate, dup), accumulated
  __device__ void operator()(const float* in, float* out) const {
    const float g = in[0], up = in[1], dy = in[2];
    const float sig = 1.0f / (1.0f + expf(-g));
    out[0] += dy * up * sig * (1.0f + g * (1.0f - sig));  // silu'(g) = sig (1 + g (1 - sig))
    out[1] += dy * (g * sig);
  }
};

struct AddInputs {  // in = (a, b); y = a + b
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0] + in[1]; }
};

ElementwiseOperands unary(ConstDevPtr x, ElemType tx, DevPtr y, ElemType ty) {
  ElementwiseOperands ops;
  ops.in[0] = x.ptr;
  ops.in_type[0] = tx;
  ops.out[0] = y.ptr;
  ops.out_type[0] = ty;
  return ops;
}

ElementwiseOperands binary(ConstDevPtr a, ElemType ta, ConstDevPtr b, ElemType tb, DevPtr y,
                           ElemType ty) {
  ElementwiseOperands ops = unary(a, ta, y, ty);
  ops.in[1] = b.ptr;
  ops.in_type[1] = tb;
  return ops;
}

void check_residual(const char* fn, int64_t n, int64_t b_n) {
  require_nonneg(fn, "n", n);
  require(b_n >= 1 && b_n <= n && n % b_n == 0, fn,
          "b_n = " + std::to_string(b_n) + " does not divide n = " + std::to_string(n));
}

}  // namespace

void gelu_forward(cudaStream_t s, ConstDevPtr x, DevPtr y, int64_t n, bool tanh_approximation) {
  const char* fn = "gelu_forward";
  require_nonneg(fn, "n", n);
  const ElemType tx = require_operand(fn, "x", x, n);
  const ElemType ty = require_operand(fn, "y", y, n);
  NvtxRange range(fn);
  launch_elementwise<1, 1, false>(s, unary(x, tx, y, ty), n, GeluForward{tanh_approximation}, fn);
}

void gelu_backward(cudaStream_t s, ConstDevPtr x, ConstDevPtr dy, DevPtr dx, int64_t n,
                   bool tanh_approximation) {
  const char* fn = "gelu_backward";
  require_nonneg(fn, "n", n);
  const ElemType tx = require_operand(fn, "x", x, n);
  const ElemType tdy = require_operand(fn, "dy", dy, n);
  const ElemType tdx = require_operand(fn, "dx", dx, n);
  NvtxRange range(fn);
  launch_elementwise<2, 1, true>(s, binary(x, tx, dy, tdy, dx, tdx), n,
                                 GeluBackward{tanh_approximation}, fn);
}

void relu_forward(cudaStream_t s, ConstDevPtr x, DevPtr y, int64_t n) {
  const char* fn = "relu_forward";
  require_nonneg(fn, "n", n);
  const ElemType tx = require_operand(fn, "x", x, n);
  const ElemType ty = require_operand(fn, "y", y, n);
  NvtxRange range(fn);
  launch_elementwise<1, 1, false>(s, unary(x, tx, y, ty), n, ReluForward{}, fn);
}

void relu_backward(cudaStream_t s, ConstDevPtr y, ConstDevPtr dy, DevPtr dx, int64_t n) {
  const char* fn = "relu_backward";
  require_nonneg(fn, "n", n);
  const ElemType ty = require_operand(fn, "y", y, n);
  const ElemType tdy = require_operand(fn, "dy", dy, n);
  const ElemType tdx = require_operand(fn, "dx", dx, n);
  NvtxRange range(fn);
  launch_elementwise<2, 1, true>(s, binary(y, ty, dy, tdy, dx, tdx), n, ReluBackward{}, fn);
}

void swiglu_forward(cudaStream_t s, ConstDevPtr gate, ConstDevPtr up, DevPtr y, int64_t n) {
  const char* fn = "swiglu_forward";
  require_nonneg(fn, "n", n);
  const ElemType tg = require_operand(fn, "gate", gate, n);
  const ElemType tu = require_operand(fn, "up", up, n);
  const ElemType ty = require_operand(fn, "y", y, n);
  NvtxRange range(fn);
  launch_elementwise<2, 1, false>(s, binary(gate, tg, up, tu, y, ty), n, SwigluForward{}, fn);
}

void swiglu_backward(cudaStream_t s, ConstDevPtr gate, ConstDevPtr up, ConstDevPtr dy, DevPtr dgate,
                     DevPtr dup, int64_t n) {
  const char* fn = "swiglu_backward";
  require_nonneg(fn, "n", n);
  ElementwiseOperands ops =
      binary(gate, require_operand(fn, "gate", gate, n), up, require_operand(fn, "up", up, n),
             dgate, require_operand(fn, "dgate", dgate, n));
  ops.in[2] = dy.ptr;
  ops.in_type[2] = require_operand(fn, "dy", dy, n);
  ops.out[1] = dup.ptr;
  ops.out_type[1] = require_operand(fn, "dup", dup, n);
  NvtxRange range(fn);
  launch_elementwise<3, 2, true>(s, ops, n, SwigluBackward{}, fn);
}

void residual_forward(cudaStream_t s, ConstDevPtr a, ConstDevPtr b, DevPtr y, int64_t n,
                      int64_t b_n) {
  const char* fn = "residual_forward";
  check_residual(fn, n, b_n);
  ElementwiseOperands ops =
      binary(a, require_operand(fn, "a", a, n), b, require_operand(fn, "b", b, b_n), y,
             require_operand(fn, "y", y, n));
  ops.in_period[1] = b_n == n ? 0 : b_n;
  NvtxRange range(fn);
  launch_elementwise<2, 1, false>(s, ops, n, AddInputs{}, fn);
}

size_t residual_backward_workspace_bytes(int64_t n, int64_t b_n) {
  if (b_n <= 0 || b_n >= n || n % b_n != 0) return 0;  // plain add (or invalid: the op throws)
  return detail::column_sum_workspace_bytes(n / b_n, b_n, 1);
}

void residual_backward(cudaStream_t s, ConstDevPtr dy, DevPtr da, DevPtr db, int64_t n, int64_t b_n,
                       Workspace ws) {
  const char* fn = "residual_backward";
  check_residual(fn, n, b_n);
  const ElemType tdy = require_operand(fn, "dy", dy, n);
  if (da.ptr != nullptr) require_operand(fn, "da", da, n);
  if (db.ptr != nullptr) require_operand(fn, "db", db, b_n);
  const bool broadcast = db.ptr != nullptr && b_n < n;
  if (broadcast) require_workspace(fn, ws, residual_backward_workspace_bytes(n, b_n));
  NvtxRange range(fn);
  if (da.ptr != nullptr) detail::launch_add(s, dy, da, n, fn);
  if (db.ptr == nullptr) return;
  if (!broadcast) {
    detail::launch_add(s, dy, db, n, fn);
    return;
  }
  // db[j] += sum over the n / b_n rows of dy viewed as [n / b_n, b_n].
  detail::ColumnSumInput in;
  in.term = detail::ColumnTerm::dy;
  in.dy = dy.ptr;
  in.dy_type = tdy;
  in.rows = n / b_n;
  in.cols = b_n;
  detail::launch_column_sum(s, in, db, DevPtr{}, ws.ptr, fn);
}

}  // namespace shardscope::engine::cuda
