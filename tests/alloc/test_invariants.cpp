// A long random sequence (fixed seed) of allocations, frees with and without
// pending events, event completions and out-of-memory retries, checking after
// every step what must always hold:
//   - each segment is covered by its blocks, back to back;
//   - no two neighbouring blocks are both reusable (coalescing is complete);
//   - every live allocation is an allocated block at its address and size;
//   - allocated = sum of live blocks, active = allocated + pending blocks,
//     reserved = sum of segments = what the backing holds.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <vector>

#include "alloc/caching_allocator.h"

using namespace shardscope::alloc;

namespace {

struct Live {
  Allocation allocation;
  uint64_t requested;
};

void check_invariants(const CachingAllocator& allocator, const NullBacking& backing,
                      const std::vector<Live>& live) {
  const auto segments = allocator.snapshot();
  uint64_t reserved = 0, allocated = 0, pending = 0, requested = 0;
  std::map<Address, BlockInfo> blocks;
  for (const SegmentInfo& segment : segments) {
    reserved += segment.bytes;
    Address cursor = segment.base;
    bool previous_reusable = false;
    for (const BlockInfo& block : segment.blocks) {
      REQUIRE(block.address == cursor);
      cursor += block.bytes;
      const bool reusable = !block.allocated && !block.pending;
      REQUIRE_FALSE((reusable && previous_reusable));
      previous_reusable = reusable;
      if (block.allocated) allocated += block.bytes;
      if (block.pending) pending += block.bytes;
      if (block.allocated || block.pending) requested += block.requested_bytes;
      blocks[block.address] = block;
    }
    REQUIRE(cursor == segment.base + segment.bytes);
  }
  for (const Live& l : live) {
    const auto it = blocks.find(l.allocation.address);
    REQUIRE(it != blocks.end());
    REQUIRE(it->second.allocated);
    REQUIRE(it->second.bytes == l.allocation.bytes);
    REQUIRE(it->second.requested_bytes == l.requested);
  }
  const Counters& c = allocator.counters();
  REQUIRE(c.allocated.current == allocated);
  REQUIRE(c.active.current == allocated + pending);
  REQUIRE(c.requested.current == requested);
  REQUIRE(c.reserved.current == reserved);
  REQUIRE(backing.reserved_bytes() == reserved);
}

void run_random_sequence(Mode mode, uint64_t seed) {
  NullBacking backing(512 * kMiB);
  AllocatorConfig config;
  config.mode = mode;
  CachingAllocator allocator(backing, config);
  std::mt19937_64 rng(seed);
  std::vector<Live> live;
  std::vector<EventId> outstanding;
  EventId next_event = 1;
  uint64_t ooms = 0;
  for (int step = 0; step < 4000; ++step) {
    const int action = static_cast<int>(rng() % 10);
    if (action < 5 || live.empty()) {
      // Sizes log-uniform from 1 B to 32 MiB, on one of three streams.
      const uint64_t bytes = uint64_t{1} << (rng() % 26);
      const uint64_t size = bytes + rng() % bytes;
      const StreamId stream = static_cast<StreamId>(rng() % 3);
      try {
        live.push_back({allocator.allocate(size, stream, static_cast<uint32_t>(step)), size});
      } catch (const OutOfMemory&) {
        ++ooms;
      }
    } else if (action < 9) {
      const size_t victim = rng() % live.size();
      if (rng() % 3 == 0) {
        const EventId event = next_event++;
        allocator.free(live[victim].allocation.handle, {event});
        outstanding.push_back(event);
      } else {
        allocator.free(live[victim].allocation.handle);
      }
      live[victim] = live.back();
      live.pop_back();
    } else if (!outstanding.empty()) {
      const size_t which = rng() % outstanding.size();
      allocator.event_completed(outstanding[which]);
      outstanding[which] = outstanding.back();
      outstanding.pop_back();
    }
    check_invariants(allocator, backing, live);
  }
  // The sequence must have reached the capacity, or it tested no OOM path.
  CHECK(ooms > 0);
  CHECK(allocator.stats().ooms == ooms);
  for (const Live& l : live) allocator.free(l.allocation.handle);
  for (EventId event : outstanding) allocator.event_completed(event);
  allocator.empty_cache();
  CHECK(allocator.counters().reserved.current == 0);
  CHECK(allocator.counters().active.current == 0);
  CHECK(backing.reserved_bytes() == 0);
}

}  // namespace

TEST_CASE("random sequence keeps the caching allocator's invariants", "[alloc][invariants]") {
  run_random_sequence(Mode::caching, 12345);
}

TEST_CASE("random sequence keeps the exact allocator's invariants", "[alloc][invariants]") {
  run_random_sequence(Mode::exact, 678);
}
