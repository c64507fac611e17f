// CachingAllocator on NullBacking, single stream: rounding, pools, segment
// sizes, splitting, coalescing, best fit, handles, peaks. NullBacking hands
// out segments back to back from B = 2^40 and never reuses addresses, so
// every address below is worked out by hand in the comments.
#include <catch2/catch.hpp>

#include "alloc/caching_allocator.h"

using namespace shardscope::alloc;

namespace {

constexpr Address B = NullBacking::kBaseAddress;

}  // namespace

TEST_CASE("allocator rounds 1 B to 512 and 513 B to 1024, packed in one 2 MiB segment", "[alloc]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  // Small segment [B, B+2MiB): 1 B -> block [B, B+512), remainder 2MiB-512 free.
  const Allocation a = allocator.allocate(1, 0);
  CHECK(a.address == B);
  CHECK(a.bytes == 512);
  // 513 B -> 1024 B from the remainder, which starts at B+512.
  const Allocation b = allocator.allocate(513, 0);
  CHECK(b.address == B + 512);
  CHECK(b.bytes == 1024);
  CHECK(allocator.counters().allocated.current == 1536);
  CHECK(allocator.counters().requested.current == 514);
  CHECK(allocator.counters().reserved.current == 2 * kMiB);
  CHECK(allocator.stats().segment_allocs == 1);
}

TEST_CASE("exactly 1 MiB is small pool (2 MiB segment), 1 MiB + 1 is large (20 MiB)", "[alloc]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  const Allocation small = allocator.allocate(kMiB, 0);      // segment 1: [B, B+2MiB)
  const Allocation large = allocator.allocate(kMiB + 1, 0);  // segment 2: [B+2MiB, B+22MiB)
  CHECK(small.address == B);
  CHECK(large.address == B + 2 * kMiB);
  CHECK(large.bytes == kMiB + 512);
  const auto segments = allocator.snapshot();
  REQUIRE(segments.size() == 2);
  CHECK(segments[0].small_pool);
  CHECK(segments[0].bytes == 2 * kMiB);
  REQUIRE(segments[0].blocks.size() == 2);  // 1 MiB used, 1 MiB free
  CHECK(segments[0].blocks[1].bytes == kMiB);
  CHECK_FALSE(segments[1].small_pool);
  CHECK(segments[1].bytes == 20 * kMiB);
  REQUIRE(segments[1].blocks.size() == 2);  // 1 MiB + 512 used, 19 MiB - 512 free
  CHECK(segments[1].blocks[1].bytes == 19 * kMiB - 512);
  // A small request is served by the small pool's free 1 MiB at B+1MiB, never
  // by the large pool's bigger free block.
  CHECK(allocator.allocate(512, 0).address == B + kMiB);
  CHECK(allocator.counters().reserved.current == 22 * kMiB);
}

TEST_CASE("5 MiB gets a 20 MiB segment, 10 MiB a 10 MiB one, 13 MiB a 14 MiB one", "[alloc]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  const Allocation five = allocator.allocate(5 * kMiB, 0);  // [B, B+20MiB), 15 MiB left free
  CHECK(five.bytes == 5 * kMiB);
  CHECK(allocator.counters().reserved.current == 20 * kMiB);
  // 10 MiB fits in the free 15 MiB block: a cached block always comes before
  // a new segment. [B+5MiB, B+15MiB), 5 MiB left free.
  const Allocation ten = allocator.allocate(10 * kMiB, 0);
  CHECK(ten.address == B + 5 * kMiB);
  CHECK(allocator.counters().reserved.current == 20 * kMiB);
  // 13 MiB fits nowhere: own segment of 14 MiB at B+20MiB. The 1 MiB
  // remainder is not split off (not > 1 MiB): the block is 14 MiB.
  const Allocation thirteen = allocator.allocate(13 * kMiB, 0);
  CHECK(thirteen.address == B + 20 * kMiB);
  CHECK(thirteen.bytes == 14 * kMiB);
  CHECK(allocator.counters().reserved.current == 34 * kMiB);
  CHECK(allocator.counters().allocated.current == 29 * kMiB);  // 5 + 10 + 14
  CHECK(allocator.counters().requested.current == 28 * kMiB);  // 5 + 10 + 13
  // A fresh 10 MiB request with nothing cached gets a 10 MiB segment.
  NullBacking backing2;
  CachingAllocator allocator2(backing2);
  allocator2.allocate(10 * kMiB, 0);
  CHECK(allocator2.counters().reserved.current == 10 * kMiB);
  allocator2.allocate(10 * kMiB - 512, 0);  // < kMinLargeAlloc: 20 MiB segment
  CHECK(allocator2.counters().reserved.current == 30 * kMiB);
}

TEST_CASE("small pool: a remainder of exactly 512 B is split off", "[alloc]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  allocator.allocate(kMiB, 0);  // [B, B+1MiB), free [B+1MiB, B+2MiB)
  // 1 MiB - 512 from the free 1 MiB block: remainder 512 >= 512 -> split.
  const Allocation a = allocator.allocate(kMiB - 512, 0);
  CHECK(a.address == B + kMiB);
  CHECK(a.bytes == kMiB - 512);
  CHECK(allocator.counters().allocated.current == 2 * kMiB - 512);
  // The 512 B remainder at B+2MiB-512 serves the next 512 B request.
  const Allocation tail = allocator.allocate(512, 0);
  CHECK(tail.address == B + 2 * kMiB - 512);
  CHECK(allocator.stats().segment_allocs == 1);
}

TEST_CASE("large pool: a remainder of exactly 1 MiB is not split off, 1 MiB + 512 is", "[alloc]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  // 19 MiB in a 20 MiB segment: remainder 1 MiB, not > 1 MiB: one 20 MiB block.
  const Allocation whole = allocator.allocate(19 * kMiB, 0);
  CHECK(whole.bytes == 20 * kMiB);
  CHECK(allocator.counters().allocated.current == 20 * kMiB);
  REQUIRE(allocator.snapshot()[0].blocks.size() == 1);
  // 19 MiB - 512 in a new 20 MiB segment at B+20MiB: remainder 1 MiB + 512 is split.
  const Allocation split = allocator.allocate(19 * kMiB - 512, 0);
  CHECK(split.address == B + 20 * kMiB);
  CHECK(split.bytes == 19 * kMiB - 512);
  const auto segments = allocator.snapshot();
  REQUIRE(segments[1].blocks.size() == 2);
  CHECK(segments[1].blocks[1].address == B + 39 * kMiB - 512);
  CHECK(segments[1].blocks[1].bytes == kMiB + 512);
  CHECK_FALSE(segments[1].blocks[1].allocated);
  // A 1 MiB + 1 request (rounded 1 MiB + 512) takes that remainder exactly.
  const Allocation rest = allocator.allocate(kMiB + 1, 0);
  CHECK(rest.address == B + 39 * kMiB - 512);
  CHECK(allocator.stats().segment_allocs == 2);
}

TEST_CASE("three freed neighbours coalesce into one block", "[alloc]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  // a, b, c, d: 512 B each at B, B+512, B+1024, B+1536; d fences off the
  // segment's free tail [B+2048, B+2MiB).
  const Allocation a = allocator.allocate(512, 0);
  const Allocation b = allocator.allocate(512, 0);
  const Allocation c = allocator.allocate(512, 0);
  const Allocation d = allocator.allocate(512, 0);
  CHECK(d.address == B + 1536);
  allocator.free(a.handle);
  allocator.free(c.handle);  // b and d are allocated: c stays alone
  REQUIRE(allocator.snapshot()[0].blocks.size() == 5);
  allocator.free(b.handle);  // merges with a before and c after: [B, B+1536) free
  const auto segment = allocator.snapshot()[0];
  REQUIRE(segment.blocks.size() == 3);
  CHECK(segment.blocks[0].address == B);
  CHECK(segment.blocks[0].bytes == 1536);
  CHECK_FALSE(segment.blocks[0].allocated);
  CHECK(segment.blocks[1].allocated);  // d
  CHECK(segment.blocks[2].bytes == 2 * kMiB - 2048);
  // 1536 B fits exactly in the merged block (best fit), not in the tail.
  CHECK(allocator.allocate(1536, 0).address == B);
  // Freeing d now merges it with the tail: [B+1536, B+2MiB) free.
  allocator.free(d.handle);
  const auto after = allocator.snapshot()[0];
  REQUIRE(after.blocks.size() == 2);
  CHECK(after.blocks[1].address == B + 1536);
  CHECK(after.blocks[1].bytes == 2 * kMiB - 1536);
}

TEST_CASE("best fit: smallest free block that fits, lowest address among equals", "[alloc]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  // Blocks at B + 512*i: a(1024) b(512) c(512) d(512) e(512) f(512), tail free.
  const Allocation a = allocator.allocate(1024, 0);
  const Allocation b = allocator.allocate(512, 0);
  const Allocation c = allocator.allocate(512, 0);
  const Allocation d = allocator.allocate(512, 0);
  const Allocation e = allocator.allocate(512, 0);
  allocator.allocate(512, 0);  // f fences e off the tail
  CHECK(a.address == B);
  CHECK(e.address == B + 2560);
  allocator.free(a.handle);  // free 1024 at B (b allocated after it)
  allocator.free(c.handle);  // free 512 at B+1536
  allocator.free(e.handle);  // free 512 at B+2560
  // 512 B: the 512 B blocks beat the 1024 B one; B+1536 beats B+2560.
  CHECK(allocator.allocate(512, 0).address == B + 1536);
  CHECK(allocator.allocate(512, 0).address == B + 2560);
  CHECK(allocator.allocate(512, 0).address == B);  // then the 1024 B block, split
  (void)b;
  (void)d;
}

TEST_CASE("a large request takes a much bigger cached block (max_split_size unlimited)",
          "[alloc]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  const Allocation big = allocator.allocate(50 * kMiB, 0);  // own 50 MiB segment
  allocator.free(big.handle);
  // PyTorch's default: no oversize rule, the 50 MiB block is split for 2 MiB.
  const Allocation two = allocator.allocate(2 * kMiB, 0);
  CHECK(two.address == B);
  CHECK(two.bytes == 2 * kMiB);
  CHECK(allocator.counters().reserved.current == 50 * kMiB);
  CHECK(allocator.stats().segment_allocs == 1);
}

TEST_CASE("freeing an unknown or already-freed handle throws InvalidHandle", "[alloc]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  CHECK_THROWS_AS(allocator.free(Handle{}), InvalidHandle);
  const Allocation a = allocator.allocate(512, 0);
  allocator.free(a.handle);
  CHECK_THROWS_AS(allocator.free(a.handle), InvalidHandle);
  CHECK_THROWS_AS(allocator.address(a.handle), InvalidHandle);
  // b reuses a's slot (the merged free block keeps it) with a new generation:
  // a's handle stays dead, b's works.
  const Allocation b = allocator.allocate(512, 0);
  CHECK(b.handle.slot == a.handle.slot);
  CHECK(b.handle.generation != a.handle.generation);
  CHECK_FALSE(allocator.is_live(a.handle));
  CHECK_THROWS_AS(allocator.free(a.handle), InvalidHandle);
  CHECK(allocator.address(b.handle) == B);
  allocator.free(b.handle);
  CHECK(allocator.counters().allocated.current == 0);
  CHECK_THROWS_WITH(allocator.free(b.handle), Catch::Contains("already freed"));
}

TEST_CASE("expandable_segments is refused where segments cannot grow in place", "[alloc]") {
  AllocatorConfig config;
  config.expandable_segments = true;
  HostBacking host;  // real memory: a segment cannot grow in place
  CHECK_THROWS_AS(CachingAllocator(host, config), UnsupportedConfig);
  CHECK_THROWS_WITH(CachingAllocator(host, config), Catch::Contains("expandable_segments"));
  NullBacking null;
  config.mode = Mode::exact;
  CHECK_THROWS_WITH(CachingAllocator(null, config), Catch::Contains("caching mode"));
}

TEST_CASE("peaks track the high-water mark, reset_peaks lowers them to current", "[alloc]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  const Allocation large = allocator.allocate(kMiB + 1, 0);  // 1 MiB + 512 block, 20 MiB segment
  allocator.allocate(100, 0);                                // 512 block, 2 MiB segment
  const Counters& c = allocator.counters();
  CHECK(c.allocated.peak == kMiB + 1024);
  CHECK(c.requested.peak == kMiB + 101);
  CHECK(c.reserved.peak == 22 * kMiB);
  allocator.free(large.handle);
  CHECK(c.allocated.current == 512);
  CHECK(c.allocated.peak == kMiB + 1024);  // unchanged by the free
  allocator.reset_peaks();
  CHECK(c.allocated.peak == 512);
  CHECK(c.requested.peak == 100);
  CHECK(c.reserved.peak == 22 * kMiB);  // the 20 MiB segment is still cached
  allocator.empty_cache();              // releases it: reserved 2 MiB, peak stays
  CHECK(c.reserved.current == 2 * kMiB);
  CHECK(c.reserved.peak == 22 * kMiB);
  allocator.reset_peaks();
  CHECK(c.reserved.peak == 2 * kMiB);
  allocator.allocate(kMiB, 0);  // from the cached 2 MiB segment: allocated 512 + 1 MiB
  CHECK(c.allocated.peak == kMiB + 512);
  CHECK(c.reserved.peak == 2 * kMiB);
}
