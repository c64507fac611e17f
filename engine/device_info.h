// What compute devices this process can use. Backends ask here before they
// start, so that a machine without a GPU or driver gets a clear error rather
// than a crash deep inside a CUDA call.
#pragma once

#include <string>

namespace shardscope::engine {

struct CudaAvailability {
  bool built = false;   // the binary was compiled with CUDA support
  bool usable = false;  // at least one device and a working driver
  int device_count = 0;
  std::string message;  // why not usable, or a one-line device summary
};

// In CUDA builds the answer comes from the CUDA module (engine/cuda_module.h),
// loaded by the first call: throws CudaModuleError (a std::runtime_error
// naming the module's file and the loader's error) when it cannot be loaded.
// Without CUDA: built = false and a message saying so.
CudaAvailability query_cuda();

}  // namespace shardscope::engine
