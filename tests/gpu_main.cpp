// main() of the GPU test binaries: exits with kGpuSkipCode (77, registered as
// ctest's SKIP_RETURN_CODE) when the CUDA runtime finds no device or no driver
// (cudaErrorNoDevice / cudaErrorInsufficientDriver), so that machines without
// a GPU report these tests skipped, never failed and never passed vacuously.
// With a device, runs Catch2 as usual on device 0.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "engine/cuda/device_query.h"

int main(int argc, char** argv) {
  constexpr int kGpuSkipCode = 77;
  const auto q = shardscope::engine::cuda::query_devices();
  if (!q.ok || q.device_count == 0) {
    std::fprintf(stderr, "SKIPPED (gpu test): %s\n", q.message.c_str());
    return kGpuSkipCode;
  }
  std::fprintf(stderr, "gpu test on %s\n", q.message.c_str());
  return Catch::Session().run(argc, argv);
}
