// Error checking for CUDA runtime calls and kernel launches. Every failure
// throws CudaError naming the call, the error and the source location; the
// engine never continues after a failed CUDA call.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace shardscope::engine::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws CudaError("<what>: <cudaGetErrorName> (<string>) at file:line").
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line);

inline void check_cuda(cudaError_t err, const char* what, const char* file, int line) {
  if (err != cudaSuccess) throw_cuda_error(err, what, file, line);
}

}  // namespace shardscope::engine::cuda

// SS_CUDA_CHECK(cudaMemsetAsync(...)): throws on failure.
#define SS_CUDA_CHECK(expr) \
  ::shardscope::engine::cuda::check_cuda((expr), #expr, __FILE__, __LINE__)
// After a kernel<<<...>>>: checks the launch (configuration errors), not the
// kernel's completion (asynchronous; a fault surfaces at the next sync).
#define SS_CUDA_CHECK_LAUNCH(name) \
  ::shardscope::engine::cuda::check_cuda(cudaGetLastError(), name, __FILE__, __LINE__)
