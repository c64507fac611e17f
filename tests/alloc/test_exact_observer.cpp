// Exact mode (no caching) and the observer's event sequence.
#include <catch2/catch.hpp>

#include <vector>

#include "alloc/caching_allocator.h"

using namespace shardscope::alloc;

namespace {

constexpr Address B = NullBacking::kBaseAddress;

AllocatorConfig exact_config() {
  AllocatorConfig config;
  config.mode = Mode::exact;
  return config;
}

class SyncingEventSource final : public EventSource {
 public:
  EventId record_event(StreamId) override { return 0; }
  bool synchronize(const std::vector<EventId>&) override { return true; }
};

}  // namespace

TEST_CASE("exact mode: one backing allocation of exactly the requested bytes each",
          "[alloc][exact]") {
  NullBacking backing;
  CachingAllocator allocator(backing, exact_config());
  const Counters& c = allocator.counters();
  const Allocation a = allocator.allocate(1, 0);  // [B, B+1); NullBacking's next base is B+512
  CHECK(a.address == B);
  CHECK(a.bytes == 1);
  const Allocation b = allocator.allocate(1000, 0);
  CHECK(b.address == B + 512);
  CHECK(b.bytes == 1000);
  for (const Counter* counter : {&c.allocated, &c.active, &c.requested, &c.reserved}) {
    CHECK(counter->current == 1001);
  }
  CHECK(allocator.stats().segment_allocs == 2);
  allocator.free(a.handle);  // released at once
  CHECK(c.reserved.current == 1000);
  CHECK(c.allocated.current == 1000);
  CHECK(allocator.stats().segment_releases == 1);
  allocator.free(b.handle, {3});  // pending: allocated drops, the release waits
  CHECK(c.allocated.current == 0);
  CHECK(c.active.current == 1000);
  CHECK(c.requested.current == 1000);
  CHECK(c.reserved.current == 1000);
  CHECK(allocator.event_completed(3) == 1);
  CHECK(c.reserved.current == 0);
  CHECK(c.active.current == 0);
  CHECK(backing.reserved_bytes() == 0);
  CHECK(c.reserved.peak == 1001);
  CHECK(c.allocated.peak == 1001);
}

TEST_CASE("exact mode: capacity is exact, synchronizing releases pending blocks",
          "[alloc][exact]") {
  NullBacking backing(1000);
  CachingAllocator allocator(backing, exact_config());
  const Allocation a = allocator.allocate(1000, 0);
  try {
    allocator.allocate(1, 0);
    FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& oom) {
    CHECK(oom.info().rounded_bytes == 1);
    CHECK(oom.info().segment_bytes == 1);
    CHECK(oom.info().reserved_bytes == 1000);
  }
  SyncingEventSource events;
  allocator.set_event_source(&events);
  allocator.free(a.handle, {5});
  CHECK(allocator.allocate(1, 0).bytes == 1);  // refused, synchronized, released, retried
  CHECK(allocator.counters().reserved.current == 1);
}

TEST_CASE("observer: time, stream, address, sizes, tag and counters of every event",
          "[alloc][observer]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  RecordingObserver observer;
  allocator.set_observer(&observer);
  allocator.set_time(10);
  const Allocation a = allocator.allocate(100, 2, 7);
  allocator.set_time(20);
  allocator.free(a.handle, {9});
  allocator.set_time(30);
  allocator.event_completed(9);
  allocator.set_time(40);
  allocator.empty_cache();

  const std::vector<AllocatorEvent>& events = observer.events;
  REQUIRE(events.size() == 5);
  const EventKind expected[] = {EventKind::segment_alloc, EventKind::allocate, EventKind::free,
                                EventKind::reusable, EventKind::segment_release};
  const TimeNs times[] = {10, 10, 20, 30, 40};
  for (size_t i = 0; i < events.size(); ++i) {
    INFO("event " << i << " " << event_kind_name(events[i].kind));
    CHECK(events[i].kind == expected[i]);
    CHECK(events[i].time_ns == times[i]);
    CHECK(events[i].stream == 2);
    CHECK(events[i].tag == 7);
    CHECK(events[i].address == B);
    CHECK(events[i].segment_base == B);
  }
  // segment_alloc: 2 MiB, counted in reserved before the block is allocated.
  CHECK(events[0].bytes == 2 * kMiB);
  CHECK(events[0].counters.reserved.current == 2 * kMiB);
  CHECK(events[0].counters.allocated.current == 0);
  // allocate: block 512, request 100.
  CHECK(events[1].bytes == 512);
  CHECK(events[1].requested_bytes == 100);
  CHECK(events[1].counters.allocated.current == 512);
  CHECK(events[1].counters.requested.current == 100);
  // free: allocated 0, still active (pending event 9).
  CHECK(events[2].counters.allocated.current == 0);
  CHECK(events[2].counters.active.current == 512);
  CHECK(events[2].counters.allocated.peak == 512);
  // reusable: active and requested 0, segment still reserved.
  CHECK(events[3].requested_bytes == 100);
  CHECK(events[3].counters.active.current == 0);
  CHECK(events[3].counters.requested.current == 0);
  CHECK(events[3].counters.reserved.current == 2 * kMiB);
  // segment_release: reserved 0.
  CHECK(events[4].bytes == 2 * kMiB);
  CHECK(events[4].counters.reserved.current == 0);
  CHECK(events[4].counters.reserved.peak == 2 * kMiB);
}

TEST_CASE("observer: a block split off a segment reports its offset in the segment",
          "[alloc][observer]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  allocator.allocate(kMiB + 1, 0);  // [B, B+1MiB+512) of a 20 MiB segment
  RecordingObserver observer;
  allocator.set_observer(&observer);
  allocator.allocate(3 * kMiB, 0, 4);  // from the free tail, no new segment
  REQUIRE(observer.events.size() == 1);
  CHECK(observer.events[0].kind == EventKind::allocate);
  CHECK(observer.events[0].address - observer.events[0].segment_base == kMiB + 512);
  CHECK(observer.events[0].tag == 4);
}
