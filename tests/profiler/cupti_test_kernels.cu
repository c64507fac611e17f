#include "tests/profiler/cupti_test_kernels.h"

// Two kernels with distinct names (extern "C": unmangled in CUPTI's records).
extern "C" __global__ void cupti_test_spin_a(int* data, long long cycles, int value) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  data[threadIdx.x] = value;  // launched with 32 threads: in bounds of 32 ints
}

extern "C" __global__ void cupti_test_spin_b(int* data, long long cycles, int value) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  data[threadIdx.x] = value;
}

namespace shardscope::test {

cudaError_t launch_spin_a(int* data, long long cycles, int value, cudaStream_t stream) {
  cupti_test_spin_a<<<1, 32, 0, stream>>>(data, cycles, value);
  return cudaGetLastError();
}

cudaError_t launch_spin_b(int* data, long long cycles, int value, cudaStream_t stream) {
  cupti_test_spin_b<<<1, 32, 0, stream>>>(data, cycles, value);
  return cudaGetLastError();
}

}  // namespace shardscope::test
