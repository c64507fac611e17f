#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/comm/divide_kernel.h"

namespace shardscope::engine::cuda {

namespace {

__device__ inline float to_float(float x) {
  return x;
}
__device__ inline float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ inline float to_float(__half x) {
  return __half2float(x);
}

template <typename T>
__device__ inline T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) {
  return x;
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ inline __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

// Grid-stride loop over data[count]: any grid size covers every element once.
template <typename T>
__global__ void divide_kernel(T* data, size_t count, float divisor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    data[i] = from_float<T>(to_float(data[i]) / divisor);
  }
}

template <typename T>
void launch(void* data, size_t count, int divisor, cudaStream_t stream) {
  constexpr unsigned kThreads = 256;
  constexpr size_t kMaxBlocks = 4096;  // grid-stride covers the rest
  const auto blocks =
      static_cast<unsigned>(std::min(kMaxBlocks, (count + kThreads - 1) / kThreads));
  divide_kernel<T>
      <<<blocks, kThreads, 0, stream>>>(static_cast<T*>(data), count, static_cast<float>(divisor));
  SS_CUDA_CHECK_LAUNCH("divide_kernel");
}

}  // namespace

void preload_divide_kernels() {
  cudaFuncAttributes attributes{};
  SS_CUDA_CHECK(cudaFuncGetAttributes(&attributes, divide_kernel<float>));
  SS_CUDA_CHECK(cudaFuncGetAttributes(&attributes, divide_kernel<__nv_bfloat16>));
  SS_CUDA_CHECK(cudaFuncGetAttributes(&attributes, divide_kernel<__half>));
}

void divide_in_place(void* data, size_t count, DivideElement element, int divisor,
                     cudaStream_t stream) {
  if (divisor < 1) {
    throw std::invalid_argument("divide_in_place: divisor " + std::to_string(divisor) + " < 1");
  }
  if (count == 0 || divisor == 1) return;
  switch (element) {
    case DivideElement::f32:
      launch<float>(data, count, divisor, stream);
      return;
    case DivideElement::bf16:
      launch<__nv_bfloat16>(data, count, divisor, stream);
      return;
    case DivideElement::f16:
      launch<__half>(data, count, divisor, stream);
      return;
  }
}

}  // namespace shardscope::engine::cuda
