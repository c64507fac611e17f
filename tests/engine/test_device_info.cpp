// Every binary starts without a GPU or driver: the CUDA runtime's answer is
// turned into a message (cudaErrorInsufficientDriver / cudaErrorNoDevice on
// the development and CI machines), never a crash or a link failure.
#include <catch2/catch.hpp>

#include "engine/device_info.h"

using shardscope::engine::query_cuda;

TEST_CASE("CUDA availability is reported as a message, never a crash", "[engine][cuda]") {
  const auto a = query_cuda();
  if (!a.built) {
    CHECK_FALSE(a.usable);
    CHECK_THAT(a.message, Catch::Contains("no CUDA support"));
  } else if (!a.usable) {
    CHECK(a.device_count == 0);
    CHECK_THAT(a.message, Catch::Contains("no usable CUDA device"));
    CHECK_THAT(a.message, Catch::Contains("cudaErrorInsufficientDriver") ||
                              Catch::Contains("cudaErrorNoDevice") ||
                              Catch::Contains("returned 0"));
  } else {
    CHECK(a.device_count > 0);
    CHECK_THAT(a.message, Catch::Contains("cuda:0"));
  }
}

TEST_CASE("repeated queries agree", "[engine][cuda]") {
  const auto a = query_cuda();
  const auto b = query_cuda();
  CHECK(a.built == b.built);
  CHECK(a.usable == b.usable);
  CHECK(a.device_count == b.device_count);
}
