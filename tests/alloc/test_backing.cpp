// Backings: HostBacking hands out real, writable, 512-byte-aligned memory;
// both enforce their capacity and reject releases of what they did not hand out.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "alloc/caching_allocator.h"

using namespace shardscope::alloc;

namespace {

uint8_t pattern(size_t allocation, size_t byte) {
  return static_cast<uint8_t>((allocation * 131 + byte * 7 + 1) & 0xff);
}

// Fills each allocation with its own pattern, then reads every one back:
// overlapping or unwritable blocks would corrupt one another.
void write_and_check(const std::vector<Allocation>& allocations,
                     const std::vector<uint64_t>& sizes) {
  for (size_t i = 0; i < allocations.size(); ++i) {
    auto* bytes = reinterpret_cast<uint8_t*>(allocations[i].address);
    for (uint64_t k = 0; k < sizes[i]; ++k) bytes[k] = pattern(i, k);
  }
  for (size_t i = 0; i < allocations.size(); ++i) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(allocations[i].address);
    uint64_t mismatches = 0;
    for (uint64_t k = 0; k < sizes[i]; ++k) mismatches += bytes[k] != pattern(i, k);
    INFO("allocation " << i);
    CHECK(mismatches == 0);
  }
}

}  // namespace

TEST_CASE("HostBacking: caching-mode blocks are writable, aligned and disjoint",
          "[alloc][backing]") {
  HostBacking backing;
  CachingAllocator allocator(backing);
  // Two small blocks share a 2 MiB segment, two large ones a 20 MiB segment.
  const std::vector<uint64_t> sizes = {3000, 700, kMiB + 1, 5 * kMiB};
  std::vector<Allocation> allocations;
  for (uint64_t size : sizes) allocations.push_back(allocator.allocate(size, 0));
  for (const Allocation& a : allocations) CHECK(a.address % 512 == 0);
  CHECK(allocations[1].address == allocations[0].address + 3072);
  CHECK(allocations[3].address == allocations[2].address + kMiB + 512);
  CHECK(backing.reserved_bytes() == 22 * kMiB);
  write_and_check(allocations, sizes);
  // Reuse after free hands out the same memory, still writable.
  allocator.free(allocations[3].handle);
  allocations[3] = allocator.allocate(5 * kMiB, 0);
  write_and_check(allocations, sizes);
}

TEST_CASE("HostBacking: exact-mode blocks of odd sizes are writable and aligned",
          "[alloc][backing]") {
  HostBacking backing;
  AllocatorConfig config;
  config.mode = Mode::exact;
  CachingAllocator allocator(backing, config);
  const std::vector<uint64_t> sizes = {3, 513, 100000};
  std::vector<Allocation> allocations;
  for (uint64_t size : sizes) allocations.push_back(allocator.allocate(size, 0));
  for (const Allocation& a : allocations) CHECK(a.address % 512 == 0);
  CHECK(backing.reserved_bytes() == 3 + 513 + 100000);
  write_and_check(allocations, sizes);
  allocator.free(allocations[0].handle);
  CHECK(backing.reserved_bytes() == 513 + 100000);
}

TEST_CASE("HostBacking: capacity refuses a segment, unknown releases throw", "[alloc][backing]") {
  HostBacking backing(4 * kMiB);
  CHECK_FALSE(backing.reserve(4 * kMiB + 1).has_value());
  const auto two = backing.reserve(2 * kMiB);
  REQUIRE(two.has_value());
  CHECK_FALSE(backing.reserve(2 * kMiB + 1).has_value());
  CHECK_THROWS_AS(backing.release(*two + 512, 2 * kMiB), UsageError);
  CHECK_THROWS_AS(backing.release(*two, kMiB), UsageError);  // wrong size
  backing.release(*two, 2 * kMiB);
  CHECK(backing.reserved_bytes() == 0);
  // Through the allocator: 3 MiB needs a 20 MiB segment, more than 4 MiB.
  CachingAllocator allocator(backing);
  CHECK_THROWS_AS(allocator.allocate(3 * kMiB, 0), OutOfMemory);
  CHECK(allocator.allocate(kMiB, 0).bytes == kMiB);  // a 2 MiB small segment fits
}

TEST_CASE("NullBacking: disjoint 512-aligned addresses, capacity, bad releases throw",
          "[alloc][backing]") {
  NullBacking backing(10000);
  const auto a = backing.reserve(1);
  const auto b = backing.reserve(0);
  const auto c = backing.reserve(600);
  REQUIRE((a && b && c));
  CHECK(*a == NullBacking::kBaseAddress);
  CHECK(*b == *a + 512);
  CHECK(*c == *b + 512);
  CHECK(backing.reserved_bytes() == 601);
  CHECK_FALSE(backing.reserve(10000 - 601 + 1).has_value());
  CHECK(backing.reserve(10000 - 601).has_value());
  CHECK_THROWS_AS(backing.release(*a, 20000), UsageError);
  CHECK_THROWS_AS(backing.release(1, 1), UsageError);
}
