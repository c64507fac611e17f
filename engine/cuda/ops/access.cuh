// Operand access for kernels that run either on packed 16-byte loads (every
// operand of one dtype T, 16-byte aligned, sizes multiples of the pack width)
// or on scalar loads of operands whose dtypes differ (run-time dtype each).
// A kernel is written once against an Access type A and instantiated for
// PackedAccess<float>, PackedAccess<__nv_bfloat16>, PackedAccess<__half> and
// ScalarAccess: four instantiations per kernel, not one per dtype combination.
//
//   A::kWidth                 elements per load/store (16 / sizeof(T), or 1)
//   A a(elem_type)            accessor of one operand (PackedAccess ignores it)
//   a.load(p, i, v)           v[0..kWidth) = p[i..i+kWidth) as fp32 (i % kWidth == 0)
//   a.store(p, i, v)          p[i..i+kWidth) = v rounded to nearest even
//   a.load1(p, i)             one element at any index
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "engine/cuda/ops/element.cuh"

namespace shardscope::engine::cuda::detail {

template <typename T>
struct PackedAccess {
  static constexpr int kWidth = 16 / static_cast<int>(sizeof(T));
  struct alignas(16) Pack {
    T v[kWidth];
  };
  PackedAccess() = default;
  __host__ __device__ explicit PackedAccess(ElemType) {}

  __device__ void load(const void* p, int64_t i, float (&v)[kWidth]) const {
    const Pack pack = *reinterpret_cast<const Pack*>(static_cast<const T*>(p) + i);
#pragma unroll
    for (int e = 0; e < kWidth; ++e) v[e] = Elem<T>::load(pack.v, e);
  }
  __device__ void store(void* p, int64_t i, const float (&v)[kWidth]) const {
    Pack pack;
#pragma unroll
    for (int e = 0; e < kWidth; ++e) Elem<T>::store(pack.v, e, v[e]);
    *reinterpret_cast<Pack*>(static_cast<T*>(p) + i) = pack;
  }
  __device__ float load1(const void* p, int64_t i) const {
    return Elem<T>::load(static_cast<const T*>(p), i);
  }
};

struct ScalarAccess {
  static constexpr int kWidth = 1;
  ElemType type = ElemType::f32;
  ScalarAccess() = default;
  __host__ __device__ explicit ScalarAccess(ElemType t) : type(t) {}

  __device__ void load(const void* p, int64_t i, float (&v)[1]) const {
    v[0] = load_elem(p, type, i);
  }
  __device__ void store(void* p, int64_t i, const float (&v)[1]) const {
    store_elem(p, type, i, v[0]);
  }
  __device__ float load1(const void* p, int64_t i) const { return load_elem(p, type, i); }
};

// Host: calls f(prototype) with a default-constructed PackedAccess<T> (T the
// element type of `common`) when `packed`, else with ScalarAccess. The kernel
// launched inside f builds each operand's accessor as A(operand_elem_type).
template <typename F>
void with_access(bool packed, ElemType common, F&& f) {
  if (!packed) {
    f(ScalarAccess{});
    return;
  }
  switch (common) {
    case ElemType::bf16:
      f(PackedAccess<__nv_bfloat16>{});
      break;
    case ElemType::f16:
      f(PackedAccess<__half>{});
      break;
    default:
      f(PackedAccess<float>{});
  }
}

// Pack width in elements of a dtype on the packed path.
inline int pack_width(ElemType t) {
  return t == ElemType::f32 ? 4 : 8;
}

}  // namespace shardscope::engine::cuda::detail
