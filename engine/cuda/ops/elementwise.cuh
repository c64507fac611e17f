// Elementwise kernels over n elements (internal to engine/cuda/ops): up to 3
// inputs and 2 outputs, each with its own dtype; math in fp32. An op is a
// functor f(x, y) with x[kIn] the inputs of one element and y[kOut] its
// outputs (pre-loaded with the outputs' current values when kReadOut, for
// backward ops that accumulate). The packed path (16-byte loads) runs when
// every operand has one dtype, is 16-byte aligned and n (and every broadcast
// period) is a multiple of the pack width; the scalar path runs otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/check.h"
#include "engine/cuda/ops/access.cuh"
#include "engine/cuda/ops/op_checks.h"

namespace shardscope::engine::cuda::detail {

struct ElementwiseOperands {
  const void* in[3] = {nullptr, nullptr, nullptr};
  ElemType in_type[3] = {ElemType::f32, ElemType::f32, ElemType::f32};
  // period > 0: input j is read at index i % period (broadcast over leading dims).
  int64_t in_period[3] = {0, 0, 0};
  void* out[2] = {nullptr, nullptr};
  ElemType out_type[2] = {ElemType::f32, ElemType::f32};
};

constexpr int kElementwiseThreads = 256;

template <int kIn, int kOut, bool kReadOut, typename A, typename F>
__global__ void __launch_bounds__(kElementwiseThreads)
    elementwise_kernel(ElementwiseOperands ops, int64_t n, F f) {
  constexpr int W = A::kWidth;
  const int64_t packs = n / W;  // n % W == 0 (host)
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += stride) {
    const int64_t i = p * W;
    float x[kIn > 0 ? kIn : 1][W];
    float y[kOut][W];
#pragma unroll
    for (int j = 0; j < kIn; ++j) {
      const int64_t at = ops.in_period[j] > 0 ? i % ops.in_period[j] : i;
      A(ops.in_type[j]).load(ops.in[j], at, x[j]);
    }
#pragma unroll
    for (int j = 0; j < kOut; ++j) {
      if (kReadOut) {
        A(ops.out_type[j]).load(ops.out[j], i, y[j]);
      } else {
#pragma unroll
        for (int e = 0; e < W; ++e) y[j][e] = 0.0f;
      }
    }
#pragma unroll
    for (int e = 0; e < W; ++e) {
      float xe[kIn > 0 ? kIn : 1];
      float ye[kOut];
#pragma unroll
      for (int j = 0; j < kIn; ++j) xe[j] = x[j][e];
#pragma unroll
      for (int j = 0; j < kOut; ++j) ye[j] = y[j][e];
      f(xe, ye);
#pragma unroll
      for (int j = 0; j < kOut; ++j) y[j][e] = ye[j];
    }
#pragma unroll
    for (int j = 0; j < kOut; ++j) A(ops.out_type[j]).store(ops.out[j], i, y[j]);
  }
}

// Launches f over n elements on stream s (no-op for n == 0). Arguments are
// validated by the caller; `name` labels launch errors.
template <int kIn, int kOut, bool kReadOut, typename F>
void launch_elementwise(cudaStream_t s, const ElementwiseOperands& ops, int64_t n, F f,
                        const char* name) {
  if (n == 0) return;
  const ElemType common = kOut > 0 ? ops.out_type[0] : ops.in_type[0];
  const int width = pack_width(common);
  bool packed = n % width == 0;
  for (int j = 0; j < kIn; ++j) {
    packed = packed && ops.in_type[j] == common && aligned_to(16, {ops.in[j]}) &&
             ops.in_period[j] % width == 0;
  }
  for (int j = 0; j < kOut; ++j)
    packed = packed && ops.out_type[j] == common && aligned_to(16, {ops.out[j]});
  with_access(packed, common, [&](auto proto) {
    using A = decltype(proto);
    const unsigned blocks = grid_for(n / A::kWidth, kElementwiseThreads);
    elementwise_kernel<kIn, kOut, kReadOut, A><<<blocks, kElementwiseThreads, 0, s>>>(ops, n, f);
  });
  SS_CUDA_CHECK_LAUNCH(name);
}

}  // namespace shardscope::engine::cuda::detail
