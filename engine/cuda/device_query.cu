#include "engine/cuda/device_query.h"

#include <cuda_runtime.h>

#include <string>

namespace shardscope::engine::cuda {

DeviceQuery query_devices() {
  DeviceQuery q;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    q.runtime_error = static_cast<int>(err);
    q.message = std::string("no usable CUDA device: ") + cudaGetErrorName(err) + " (" +
                cudaGetErrorString(err) + ")";
    cudaGetLastError();  // clear the sticky-free error state
    return q;
  }
  q.ok = true;
  q.device_count = count;
  if (count == 0) {
    q.message = "no usable CUDA device: cudaGetDeviceCount returned 0";
    return q;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    if (!q.message.empty()) q.message += "; ";
    q.message += "cuda:" + std::to_string(d) + " " + prop.name + " (sm_" +
                 std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
                 std::to_string(prop.totalGlobalMem >> 20) + " MiB)";
  }
  return q;
}

}  // namespace shardscope::engine::cuda
