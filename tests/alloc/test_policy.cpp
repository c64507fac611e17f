// The size rules alone (alloc/policy.h), against PyTorch's constants:
// kMinBlockSize 512, kSmallSize 1 MiB, kSmallBuffer 2 MiB, kLargeBuffer 20 MiB,
// kMinLargeAlloc 10 MiB, kRoundLarge 2 MiB.
#include <catch2/catch.hpp>

#include "alloc/policy.h"

using namespace shardscope::alloc;

TEST_CASE("round_size: multiples of 512 B, at least 512 B", "[alloc][policy]") {
  CHECK(round_size(0) == 512);
  CHECK(round_size(1) == 512);
  CHECK(round_size(512) == 512);
  CHECK(round_size(513) == 1024);
  CHECK(round_size(1000) == 1024);
  CHECK(round_size(kMiB + 1) == kMiB + 512);
}

TEST_CASE("pool boundary: rounded 1 MiB is small, 1 MiB + 1 rounds to 1 MiB + 512: large",
          "[alloc][policy]") {
  CHECK(is_small_size(round_size(kMiB)));
  CHECK_FALSE(is_small_size(round_size(kMiB + 1)));
  // 1 MiB - 1 rounds up to exactly 1 MiB: still small.
  CHECK(is_small_size(round_size(kMiB - 1)));
}

TEST_CASE("allocation_size: 2 MiB small, 20 MiB under 10 MiB, else rounded to 2 MiB",
          "[alloc][policy]") {
  CHECK(allocation_size(512) == 2 * kMiB);
  CHECK(allocation_size(kMiB) == 2 * kMiB);
  CHECK(allocation_size(kMiB + 512) == 20 * kMiB);
  CHECK(allocation_size(5 * kMiB) == 20 * kMiB);
  CHECK(allocation_size(10 * kMiB - 512) == 20 * kMiB);  // still < kMinLargeAlloc
  CHECK(allocation_size(10 * kMiB) == 10 * kMiB);        // own segment, already a 2 MiB multiple
  CHECK(allocation_size(13 * kMiB) == 14 * kMiB);
  CHECK(allocation_size(14 * kMiB + 512) == 16 * kMiB);
}

TEST_CASE("should_split: small pool remainder >= 512 B, large pool remainder > 1 MiB",
          "[alloc][policy]") {
  CHECK(should_split(true, 1024, 512));                    // remainder 512: splits
  CHECK_FALSE(should_split(true, 512, 512));               // remainder 0
  CHECK_FALSE(should_split(false, 20 * kMiB, 19 * kMiB));  // remainder exactly 1 MiB
  CHECK(should_split(false, 20 * kMiB, 19 * kMiB - 512));  // remainder 1 MiB + 512
  CHECK_FALSE(should_split(false, 14 * kMiB, 13 * kMiB));  // 13 MiB in its 14 MiB segment
}
