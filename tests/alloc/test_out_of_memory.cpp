// The out-of-memory path (PyTorch's malloc: alloc_block, then
// release_cached_blocks = synchronize events + release every unsplit cached
// segment of every stream, then alloc_block again, then OutOfMemoryError).
// NullBacking with a capacity; addresses are never reused, so a segment
// obtained after a release still comes after every earlier one.
#include <catch2/catch.hpp>

#include <vector>

#include "alloc/caching_allocator.h"

using namespace shardscope::alloc;

namespace {

constexpr Address B = NullBacking::kBaseAddress;

class SyncingEventSource final : public EventSource {
 public:
  EventId record_event(StreamId) override { return 0; }
  bool synchronize(const std::vector<EventId>& outstanding) override {
    synchronized.push_back(outstanding);
    return can_synchronize;
  }
  bool can_synchronize = true;
  std::vector<std::vector<EventId>> synchronized;
};

}  // namespace

TEST_CASE("out of memory: releasing another stream's cached segment lets the retry succeed",
          "[alloc][oom]") {
  NullBacking backing(21 * kMiB);
  CachingAllocator allocator(backing);
  const Allocation other = allocator.allocate(512, 1);  // 2 MiB segment [B, B+2MiB), stream 1
  allocator.free(other.handle);                         // cached, entirely free
  // 5 MiB needs a 20 MiB segment: 2 + 20 > 21 MiB, refused; the cached 2 MiB
  // segment is released, and the retry gets [B+2MiB, B+22MiB).
  const Allocation five = allocator.allocate(5 * kMiB, 0);
  CHECK(five.address == B + 2 * kMiB);
  CHECK(allocator.stats().alloc_retries == 1);
  CHECK(allocator.stats().segment_releases == 1);
  CHECK(allocator.stats().ooms == 0);
  CHECK(allocator.counters().reserved.current == 20 * kMiB);
  CHECK(backing.reserved_bytes() == 20 * kMiB);
}

TEST_CASE("out of memory: split segments stay, OutOfMemory states the figures", "[alloc][oom]") {
  NullBacking backing(30 * kMiB);
  CachingAllocator allocator(backing);
  RecordingObserver observer;
  allocator.set_observer(&observer);
  // [B, B+20MiB): a = 5 MiB at B, b = 5 MiB at B+5MiB, 10 MiB free tail.
  const Allocation a = allocator.allocate(5 * kMiB, 0);
  allocator.allocate(5 * kMiB, 0);
  allocator.free(a.handle);  // 5 MiB free at B: the segment is split, never released
  // 12 MiB + 1 -> block 12 MiB + 512, segment 14 MiB: 20 + 14 > 30 MiB.
  const uint64_t requested = 12 * kMiB + 1;
  try {
    allocator.allocate(requested, 0);
    FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& oom) {
    CHECK(oom.info().requested_bytes == 12582913);
    CHECK(oom.info().rounded_bytes == 12583424);
    CHECK(oom.info().segment_bytes == 14680064);
    CHECK(oom.info().allocated_bytes == 5242880);
    CHECK(oom.info().reserved_bytes == 20971520);
    CHECK(oom.info().capacity_bytes == 31457280);
    const std::string message = oom.what();
    CHECK_THAT(message, Catch::Contains("tried to allocate 12582913 B (12.00 MiB)"));
    CHECK_THAT(message, Catch::Contains("allocated 5242880 B"));
    CHECK_THAT(message, Catch::Contains("reserved 20971520 B"));
    CHECK_THAT(message, Catch::Contains("capacity 31457280 B"));
  }
  CHECK(allocator.stats().ooms == 1);
  CHECK(allocator.stats().segment_releases == 0);
  CHECK(allocator.counters().allocated.current == 5 * kMiB);
  CHECK(allocator.counters().reserved.current == 20 * kMiB);
  REQUIRE_FALSE(observer.events.empty());
  CHECK(observer.events.back().kind == EventKind::out_of_memory);
  CHECK(observer.events.back().requested_bytes == requested);
  // OutOfMemory is an alloc::Error.
  CHECK_THROWS_AS(allocator.allocate(requested, 0), Error);
}

TEST_CASE("out of memory: synchronize completes pending events, their segment is released",
          "[alloc][oom]") {
  NullBacking backing(21 * kMiB);
  CachingAllocator allocator(backing);
  SyncingEventSource events;
  allocator.set_event_source(&events);
  const Allocation x = allocator.allocate(512, 1);  // [B, B+2MiB), stream 1
  allocator.free(x.handle, {42, 41});               // pending: the segment is not free
  const Allocation five = allocator.allocate(5 * kMiB, 0);
  // Synchronize got the outstanding events in ascending order; x became
  // reusable, its segment entirely free, released; the retry succeeded.
  REQUIRE(events.synchronized.size() == 1);
  CHECK(events.synchronized[0] == std::vector<EventId>{41, 42});
  CHECK(allocator.stats().synchronizations == 1);
  CHECK(allocator.outstanding_events() == 0);
  CHECK(five.address == B + 2 * kMiB);
  CHECK(allocator.counters().reserved.current == 20 * kMiB);
  CHECK(allocator.counters().active.current == 5 * kMiB);
}

TEST_CASE("out of memory: a pending block keeps its segment when nobody can synchronize",
          "[alloc][oom]") {
  NullBacking backing(21 * kMiB);
  CachingAllocator allocator(backing);
  SyncingEventSource events;
  events.can_synchronize = false;
  allocator.set_event_source(&events);
  const Allocation x = allocator.allocate(512, 1);
  allocator.free(x.handle, {41});
  CHECK_THROWS_AS(allocator.allocate(5 * kMiB, 0), OutOfMemory);
  CHECK(events.synchronized.size() == 1);  // asked, declined
  CHECK(allocator.stats().synchronizations == 0);
  CHECK(allocator.outstanding_events() == 1);
  CHECK(allocator.counters().reserved.current == 2 * kMiB);
  // Once the executor reports the event, the release makes room.
  allocator.event_completed(41);
  CHECK(allocator.allocate(5 * kMiB, 0).bytes == 5 * kMiB);
}

TEST_CASE("out of memory: the retry does not search the pools again (as PyTorch)", "[alloc][oom]") {
  NullBacking backing(20 * kMiB);
  CachingAllocator allocator(backing);
  SyncingEventSource events;
  allocator.set_event_source(&events);
  // One 20 MiB segment, all handed out: a [B, +5MiB), b [+5, +10), c [+10, +20).
  const Allocation a = allocator.allocate(5 * kMiB, 0);
  allocator.allocate(5 * kMiB, 0);
  allocator.allocate(10 * kMiB, 0);
  allocator.free(a.handle, {1});  // pending
  // No cached block fits; a new segment is refused; synchronize makes a
  // reusable, but its segment is split so nothing is released, and PyTorch
  // only retries the segment allocation: OutOfMemory although a would fit.
  CHECK_THROWS_AS(allocator.allocate(5 * kMiB, 0), OutOfMemory);
  CHECK(allocator.outstanding_events() == 0);
  // The next call finds a in the pool.
  CHECK(allocator.allocate(5 * kMiB, 0).address == B);
}

TEST_CASE("requests of 1 EiB or more fail at once", "[alloc][oom]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  CHECK_THROWS_AS(allocator.allocate(kMaxRequest, 0), OutOfMemory);
  CHECK(allocator.stats().segment_allocs == 0);
}

TEST_CASE("a request of 1 EiB or more says so, not that it exceeds a larger capacity",
          "[alloc][oom]") {
  // Was "tried to allocate ... (3.00 EiB) ... capacity ... (3.81 EiB)": refused
  // by size alone, with a capacity above the request.
  NullBacking backing(uint64_t{4393751543808} << 20);  // 3.81 EiB
  CachingAllocator allocator(backing);
  const uint64_t request = 3 * kMaxRequest;  // 3.00 EiB
  try {
    allocator.allocate(request, 0);
    FAIL("no OutOfMemory");
  } catch (const OutOfMemory& e) {
    const std::string message = e.what();
    CHECK(message ==
          "out of memory: tried to allocate 3458764513820540928 B (3.00 EiB) on stream 0, at or "
          "above the largest request the caching allocator serves, 1152921504606846976 B (1.00 "
          "EiB) (PyTorch refuses \"more than 1EB\" whatever the capacity); allocated 0 B (0.00 "
          "B), reserved 0 B (0.00 B)");
    CHECK(e.info().capacity_bytes == backing.capacity_bytes());
  }
}
