// Makes a CUDA device current for a scope and restores the previous one: the
// engine's objects remember their device and may be called from a thread
// whose current device is another one.
#pragma once

#include <cuda_runtime.h>

#include "engine/cuda/check.h"

namespace shardscope::engine::cuda {

class ScopedDevice {
 public:
  // Throws CudaError (no driver, no such device).
  explicit ScopedDevice(int device) {
    SS_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) SS_CUDA_CHECK(cudaSetDevice(device));
    device_ = device;
  }
  // Restoring cannot throw: a failure here leaves `device_` current.
  ~ScopedDevice() {
    if (previous_ != device_) (void)cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = 0;
  int device_ = 0;
};

}  // namespace shardscope::engine::cuda
