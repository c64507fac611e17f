// Casts, copies, gradient accumulation and scaling (elementwise, any dtypes).
#include "engine/cuda/check.h"
#include "engine/cuda/ops/elementwise.cuh"
#include "engine/cuda/ops/internal.h"
#include "engine/cuda/ops/nvtx_range.h"
#include "engine/cuda/ops/op_checks.h"
#include "engine/cuda/ops/ops.h"

namespace shardscope::engine::cuda {

namespace detail {

namespace {

struct CopyOp {  // y = x
  __device__ void operator()(const float* x, float* y) const { y[0] = x[0]; }
};
struct AddOp {  // y += x
  __device__ void operator()(const float* x, float* y) const { y[0] += x[0]; }
};
struct ScaleOp {  // y = x * factor (x aliases y), factor from the host or the device
  float factor;
  const float* factor_dev;
  __device__ void operator()(const float* x, float* y) const {
    y[0] = x[0] * (factor_dev != nullptr ? *factor_dev : factor);
  }
};

}  // namespace

void launch_copy(cudaStream_t s, ConstDevPtr src, DevPtr dst, int64_t n, const char* name) {
  if (n == 0) return;
  if (src.dt == dst.dt) {
    SS_CUDA_CHECK(cudaMemcpyAsync(dst.ptr, src.ptr,
                                  static_cast<size_t>(n) * plan::dtype_bytes(dst.dt),
                                  cudaMemcpyDeviceToDevice, s));
    return;
  }
  ElementwiseOperands ops;
  ops.in[0] = src.ptr;
  ops.in_type[0] = elem_type(src.dt, name);
  ops.out[0] = dst.ptr;
  ops.out_type[0] = elem_type(dst.dt, name);
  launch_elementwise<1, 1, false>(s, ops, n, CopyOp{}, name);
}

void launch_add(cudaStream_t s, ConstDevPtr src, DevPtr dst, int64_t n, const char* name) {
  ElementwiseOperands ops;
  ops.in[0] = src.ptr;
  ops.in_type[0] = elem_type(src.dt, name);
  ops.out[0] = dst.ptr;
  ops.out_type[0] = elem_type(dst.dt, name);
  launch_elementwise<1, 1, true>(s, ops, n, AddOp{}, name);
}

void launch_broadcast_rows(cudaStream_t s, ConstDevPtr src, DevPtr dst, int64_t rows, int64_t cols,
                           const char* name) {
  ElementwiseOperands ops;
  ops.in[0] = src.ptr;
  ops.in_type[0] = elem_type(src.dt, name);
  ops.in_period[0] = cols;
  ops.out[0] = dst.ptr;
  ops.out_type[0] = elem_type(dst.dt, name);
  launch_elementwise<1, 1, false>(s, ops, rows * cols, CopyOp{}, name);
}

}  // namespace detail

using detail::require_nonneg;
using detail::require_operand;

void cast(cudaStream_t s, ConstDevPtr src, DevPtr dst, int64_t n) {
  const char* fn = "cast";
  require_nonneg(fn, "n", n);
  require_operand(fn, "src", src, n);
  require_operand(fn, "dst", dst, n);
  NvtxRange range(fn);
  detail::launch_copy(s, src, dst, n, fn);
}

void add_inplace(cudaStream_t s, ConstDevPtr src, DevPtr dst, int64_t n) {
  const char* fn = "add_inplace";
  require_nonneg(fn, "n", n);
  require_operand(fn, "src", src, n);
  require_operand(fn, "dst", dst, n);
  NvtxRange range(fn);
  detail::launch_add(s, src, dst, n, fn);
}

void scale_inplace(cudaStream_t s, DevPtr x, int64_t n, float factor, const float* factor_dev) {
  const char* fn = "scale_inplace";
  require_nonneg(fn, "n", n);
  const ElemType t = require_operand(fn, "x", x, n);
  NvtxRange range(fn);
  detail::ElementwiseOperands ops;
  ops.in[0] = x.ptr;
  ops.in_type[0] = t;
  ops.out[0] = x.ptr;
  ops.out_type[0] = t;
  detail::launch_elementwise<1, 1, false>(s, ops, n, detail::ScaleOp{factor, factor_dev}, fn);
}

}  // namespace shardscope::engine::cuda
