// Device-side element access for DevPtr operands whose dtype is known only at
// run time (f32, bf16, f16): load as fp32, store rounded to nearest even. The
// dtype is uniform across a launch, so the switch does not diverge. Kernels
// on hot paths template on the element type instead (Elem<T>).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "engine/cuda/ops/dev_ptr.h"

namespace shardscope::engine::cuda {

// plan::DType values as small ints usable in device code.
enum class ElemType : uint8_t { f32 = 0, bf16 = 1, f16 = 2 };

// Throws std::invalid_argument naming `what` for a dtype other than f32/bf16/f16.
ElemType elem_type(plan::DType dt, const char* what);

template <typename T>
struct Elem;
template <>
struct Elem<float> {
  __device__ static float load(const float* p, int64_t i) { return p[i]; }
  __device__ static void store(float* p, int64_t i, float v) { p[i] = v; }
};
template <>
struct Elem<__nv_bfloat16> {
  __device__ static float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
  __device__ static void store(__nv_bfloat16* p, int64_t i, float v) {
    p[i] = __float2bfloat16_rn(v);
  }
};
template <>
struct Elem<__half> {
  __device__ static float load(const __half* p, int64_t i) { return __half2float(p[i]); }
  __device__ static void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
};

__device__ inline float load_elem(const void* p, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case ElemType::f16:
      return __half2float(static_cast<const __half*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

__device__ inline void store_elem(void* p, ElemType t, int64_t i, float v) {
  switch (t) {
    case ElemType::bf16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
    case ElemType::f16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
  }
}

// Calls f(T{}) with T the element type of `t` (float, __nv_bfloat16, __half):
// host-side dispatch to templated kernels.
template <typename F>
void dispatch_elem(ElemType t, F&& f) {
  switch (t) {
    case ElemType::bf16:
      f(__nv_bfloat16{});
      break;
    case ElemType::f16:
      f(__half{});
      break;
    default:
      f(float{});
  }
}

}  // namespace shardscope::engine::cuda
