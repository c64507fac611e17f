// expandable_segments:True (docs/allocator.md, "Expandable segments"): one
// segment per stream and pool growing by 20 MiB pages (large pool) or 2 MiB
// pages (small pool), split at >= 512 B in both pools, pages unmapped only by
// empty_cache / the out-of-memory retry. Figures computed by hand.
#include <catch2/catch.hpp>

#include "alloc/caching_allocator.h"

using namespace shardscope::alloc;

namespace {
AllocatorConfig expandable() {
  AllocatorConfig c;
  c.expandable_segments = true;
  return c;
}
}  // namespace

TEST_CASE("expandable: a freed block grows in place where fixed segments add one", "[alloc]") {
  // Fixed: 30 MiB -> a 30 MiB segment; freed; 40 MiB does not fit it -> a
  // 40 MiB segment: 70 MiB reserved.
  NullBacking fixed_backing;
  CachingAllocator fixed(fixed_backing);
  fixed.free(fixed.allocate(30 * kMiB, 0).handle);
  fixed.allocate(40 * kMiB, 0);
  CHECK(fixed.counters().reserved.current == 70 * kMiB);
  // Expandable: 30 MiB maps 2 pages (40 MiB), split [30 | 10 free]; freed,
  // the 40 MiB block serves the 40 MiB request: 40 MiB reserved.
  NullBacking backing;
  CachingAllocator allocator(backing, expandable());
  const Allocation a = allocator.allocate(30 * kMiB, 0);
  CHECK(allocator.counters().reserved.current == 40 * kMiB);
  CHECK(a.bytes == 30 * kMiB);
  allocator.free(a.handle);
  const Allocation b = allocator.allocate(40 * kMiB, 0);
  CHECK(b.address == a.address);
  CHECK(allocator.counters().reserved.current == 40 * kMiB);
  CHECK(backing.reserved_bytes() == 40 * kMiB);
  // 5 MiB more: no free block; the end is allocated, so one 20 MiB page is
  // mapped after it, split [5 | 15 free].
  const Allocation c = allocator.allocate(5 * kMiB, 0);
  CHECK(c.address == b.address + 40 * kMiB);
  CHECK(allocator.counters().reserved.current == 60 * kMiB);
  // 25 MiB: the free 15 MiB tail is extended by one page (15 + 20 = 35 MiB).
  const Allocation d = allocator.allocate(25 * kMiB, 0);
  CHECK(d.address == c.address + 5 * kMiB);
  CHECK(allocator.counters().reserved.current == 80 * kMiB);
  const std::vector<SegmentInfo> segs = allocator.snapshot();
  REQUIRE(segs.size() == 1);  // one segment for the stream's large pool
  CHECK(segs[0].expandable);
  CHECK(segs[0].bytes == 80 * kMiB);
  REQUIRE(segs[0].blocks.size() == 4);  // 40, 5, 25 allocated and a 10 MiB free tail
  CHECK(segs[0].blocks[3].bytes == 10 * kMiB);
  CHECK_FALSE(segs[0].blocks[3].allocated);
}

TEST_CASE("expandable: both pools split at 512 B, each stream and pool has its own segment",
          "[alloc]") {
  NullBacking backing;
  CachingAllocator allocator(backing, expandable());
  // 20 MiB - 1 KiB: the 1 KiB remainder of the page is split off (a fixed
  // segment keeps it: remainder <= 1 MiB in the large pool).
  const Allocation big = allocator.allocate(20 * kMiB - 1024, 0);
  CHECK(big.bytes == 20 * kMiB - 1024);
  CHECK(allocator.counters().allocated.current == 20 * kMiB - 1024);
  // Small pool: 2 MiB pages. 600 KiB + 600 KiB + 900 KiB = 2100 KiB > 2048:
  // a second page.
  allocator.allocate(600 * 1024, 0);
  allocator.allocate(600 * 1024, 0);
  CHECK(allocator.counters().reserved.current == 22 * kMiB);
  allocator.allocate(900 * 1024, 0);
  CHECK(allocator.counters().reserved.current == 24 * kMiB);
  // Another stream: its own large segment, its own page.
  allocator.allocate(1 * kMiB + 512, 1);
  CHECK(allocator.counters().reserved.current == 44 * kMiB);
  CHECK(allocator.snapshot().size() == 3);
}

TEST_CASE("expandable: empty_cache unmaps the whole free pages at a segment's end", "[alloc]") {
  NullBacking backing;
  CachingAllocator allocator(backing, expandable());
  const Allocation a = allocator.allocate(30 * kMiB, 0);  // pages [0, 40) MiB
  const Allocation b = allocator.allocate(5 * kMiB, 0);   // [30, 35), tail [35, 40) free
  allocator.free(a.handle);
  allocator.empty_cache();
  // The free tail starts at 35 MiB: no whole page in it; the free block at
  // the front is not at the end.
  CHECK(allocator.counters().reserved.current == 40 * kMiB);
  allocator.free(b.handle);  // one free 40 MiB block: both pages go
  allocator.empty_cache();
  CHECK(allocator.counters().reserved.current == 0);
  CHECK(backing.reserved_bytes() == 0);
  CHECK(allocator.snapshot().empty());
  // It grows again from the same base.
  const Allocation c = allocator.allocate(1 * kMiB + 512, 0);
  CHECK(c.address == a.address);
  CHECK(allocator.counters().reserved.current == 20 * kMiB);
}

TEST_CASE("expandable: out of memory unmaps free pages, retries once, then throws", "[alloc]") {
  NullBacking backing(60 * kMiB);
  CachingAllocator allocator(backing, expandable());
  allocator.free(allocator.allocate(30 * kMiB, 0).handle);    // 40 MiB mapped, free
  const Allocation other = allocator.allocate(10 * kMiB, 1);  // stream 1: 20 MiB
  // 50 MiB on stream 0: the free 40 MiB tail needs one more page: 80 MiB >
  // 60 MiB; the retry unmaps stream 0's two free pages, then needs three
  // (60 MiB), which with stream 1's page is 80 MiB: out of memory.
  CHECK_THROWS_AS(allocator.allocate(50 * kMiB, 0), OutOfMemory);
  CHECK(allocator.stats().alloc_retries == 1);
  CHECK(allocator.counters().reserved.current == 20 * kMiB);
  // 40 MiB fits after the release: two pages again.
  allocator.allocate(40 * kMiB, 0);
  CHECK(allocator.counters().reserved.current == 60 * kMiB);
  allocator.free(other.handle);
}
