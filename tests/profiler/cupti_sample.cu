// A small CUDA program for the injection test (test_cupti.cpp runs it under
// `shardscope profile`): 8 MiB allocated, one 8 MiB memset, two steps in NVTX
// ranges "ProfilerStep#1" / "ProfilerStep#2", each with two launches of
// sample_kernel, the second inside an NVTX range "sample_range". Exit 0 on
// success, 1 with a message on any CUDA error.
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <string>

extern "C" __global__ void sample_kernel(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 2.0f + 1.0f;
}

#define SAMPLE_CHECK(call)                                                                       \
  do {                                                                                           \
    const cudaError_t e = (call);                                                                \
    if (e != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

int main() {
  constexpr size_t kBytes = size_t{8} << 20;
  constexpr int kCount = static_cast<int>(kBytes / sizeof(float));  // 2Mi floats
  constexpr int kThreads = 256;
  constexpr int kBlocks = (kCount + kThreads - 1) / kThreads;  // 8192 <= 2^31 - 1
  float* x = nullptr;
  SAMPLE_CHECK(cudaMalloc(&x, kBytes));
  SAMPLE_CHECK(cudaMemset(x, 0, kBytes));
  for (int step = 1; step <= 2; ++step) {
    const std::string name = "ProfilerStep#" + std::to_string(step);
    nvtxRangePushA(name.c_str());
    sample_kernel<<<kBlocks, kThreads>>>(x, kCount);
    SAMPLE_CHECK(cudaGetLastError());
    nvtxRangePushA("sample_range");
    sample_kernel<<<kBlocks, kThreads>>>(x, kCount);
    SAMPLE_CHECK(cudaGetLastError());
    nvtxRangePop();
    SAMPLE_CHECK(cudaDeviceSynchronize());
    nvtxRangePop();
  }
  SAMPLE_CHECK(cudaFree(x));
  return 0;
}
