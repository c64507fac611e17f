// engine/cuda/memory on any machine: without a driver or device, CudaBacking
// and CudaEventSource refuse to start with a CudaError naming the runtime's
// error; with a device they start (and a device that is not there is named).
#include <catch2/catch.hpp>

#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/device_query.h"
#include "engine/cuda/memory/cuda_backing.h"

using namespace shardscope::engine::cuda;

namespace {

bool have_device() {
  const DeviceQuery query = query_devices();
  return query.ok && query.device_count > 0;
}

// The runtime's answer on a machine without a GPU: no driver, or no device.
bool names_missing_driver(const std::string& message) {
  return message.find("cudaErrorInsufficientDriver") != std::string::npos ||
         message.find("cudaErrorNoDevice") != std::string::npos;
}

template <typename F>
std::string cuda_error_of(F&& make) {
  try {
    make();
  } catch (const CudaError& e) {
    return e.what();
  }
  return "(no CudaError)";
}

}  // namespace

TEST_CASE("cuda backing: no driver is a CudaError naming the runtime error") {
  if (have_device()) {
    const std::string message = cuda_error_of([] { CudaBacking backing(999); });
    CHECK_THAT(message, Catch::Contains("CudaBacking: device 999 does not exist"));
    CudaBacking backing(0, 1 << 20);
    CHECK(backing.capacity_bytes() == (1u << 20));
    CHECK(backing.reserved_bytes() == 0);
  } else {
    const std::string message = cuda_error_of([] { CudaBacking backing(0); });
    INFO(message);
    CHECK(names_missing_driver(message));
    CHECK_THAT(message, Catch::Contains("cudaGetDeviceCount"));
  }
}

TEST_CASE("cuda event source: no driver is a CudaError naming the runtime error") {
  if (have_device()) {
    CudaEventSource events({nullptr});
    CHECK(events.outstanding() == 0);
    CHECK(events.poll() == 0);
  } else {
    const std::string message = cuda_error_of([] { CudaEventSource events({nullptr}); });
    INFO(message);
    CHECK(names_missing_driver(message));
    CHECK_THAT(message, Catch::Contains("cudaGetDevice"));
  }
}
