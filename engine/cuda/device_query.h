// Host-side query of CUDA devices through the CUDA runtime (never the driver
// library): on a machine without a driver cudaGetDeviceCount returns
// cudaErrorInsufficientDriver (35) or cudaErrorNoDevice (100), which we turn
// into a message rather than a failure to start.
#pragma once

#include <string>

namespace shardscope::engine::cuda {

struct DeviceQuery {
  bool ok = false;  // the runtime answered without error
  int device_count = 0;
  int runtime_error = 0;  // cudaError_t value when !ok
  std::string message;    // device names, or the runtime's error string
};

DeviceQuery query_devices();

}  // namespace shardscope::engine::cuda
