// Fake device addresses for the launchers' argument-check tests
// (test_cuda_ops_args.cpp, test_cuda_moe_args.cpp), which run without a GPU:
// never dereferenced, since every call under test throws before any CUDA
// call. 256-byte aligned like cudaMalloc's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/ops/dev_ptr.h"

namespace shardscope::engine::cuda::test {

inline void* fake(uintptr_t slot) {
  return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + slot * 256);
}
inline DevPtr f32(uintptr_t slot) {
  return {fake(slot), plan::DType::f32};
}
inline DevPtr bf16(uintptr_t slot) {
  return {fake(slot), plan::DType::bf16};
}
inline float* fptr(uintptr_t slot) {
  return static_cast<float*>(fake(slot));
}
inline int64_t* i64(uintptr_t slot) {
  return static_cast<int64_t*>(fake(slot));
}
inline const cudaStream_t kStream = nullptr;

}  // namespace shardscope::engine::cuda::test
