#include "engine/cuda/check.h"
#include "tests/engine/cuda/test_cuda_memory_gate.h"

namespace shardscope::engine::cuda::test {

namespace {

__device__ inline uint64_t global_timer_ns() {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

// flags[0]: gate (host writes 1), flags[1]: set to 1 when the timeout ended the wait.
__global__ void gate_kernel(volatile uint32_t* flags, uint64_t timeout_ns) {
  const uint64_t start = global_timer_ns();
  while (flags[0] == 0) {
    if (global_timer_ns() - start > timeout_ns) {
      flags[1] = 1;
      return;
    }
    __nanosleep(1000);
  }
}

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < ns) __nanosleep(1000);
}

}  // namespace

HostGate::HostGate() {
  void* host = nullptr;
  SS_CUDA_CHECK(cudaHostAlloc(&host, 2 * sizeof(uint32_t), cudaHostAllocMapped));
  host_ = static_cast<volatile uint32_t*>(host);
  host_[0] = 0;
  host_[1] = 0;
  void* device = nullptr;
  SS_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0));
  device_ = static_cast<uint32_t*>(device);
}

HostGate::~HostGate() {
  host_[0] = 1;  // a kernel still waiting ends; then the memory may go
  (void)cudaDeviceSynchronize();
  (void)cudaFreeHost(const_cast<uint32_t*>(host_));
}

void HostGate::hold(cudaStream_t stream, int64_t timeout_ns) {
  gate_kernel<<<1, 1, 0, stream>>>(device_, static_cast<uint64_t>(timeout_ns));
  SS_CUDA_CHECK_LAUNCH("gate_kernel");
}

void HostGate::open() {
  host_[0] = 1;
}

bool HostGate::timed_out() const {
  return host_[1] != 0;
}

void preload_test_kernels() {
  cudaFuncAttributes attributes{};
  SS_CUDA_CHECK(cudaFuncGetAttributes(&attributes, gate_kernel));
  SS_CUDA_CHECK(cudaFuncGetAttributes(&attributes, spin_kernel));
}

void launch_spin(cudaStream_t stream, int64_t ns) {
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(ns));
  SS_CUDA_CHECK_LAUNCH("spin_kernel");
}

}  // namespace shardscope::engine::cuda::test
