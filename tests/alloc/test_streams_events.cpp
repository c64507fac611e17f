// Per-stream pools and delayed reuse across streams: explicit events passed
// to free(), record_stream() with an EventSource, and the counters while a
// block waits (allocated drops at free(), active/requested when reusable,
// reserved not at all).
#include <catch2/catch.hpp>

#include <vector>

#include "alloc/caching_allocator.h"

using namespace shardscope::alloc;

namespace {

constexpr Address B = NullBacking::kBaseAddress;

// Hands out event ids 100, 101, ... and remembers on which stream.
class FakeEventSource final : public EventSource {
 public:
  EventId record_event(StreamId stream) override {
    recorded_streams.push_back(stream);
    return next_id++;
  }
  bool synchronize(const std::vector<EventId>& outstanding) override {
    synchronized.push_back(outstanding);
    return can_synchronize;
  }
  EventId next_id = 100;
  bool can_synchronize = true;
  std::vector<StreamId> recorded_streams;
  std::vector<std::vector<EventId>> synchronized;
};

}  // namespace

TEST_CASE("a block freed on one stream is not reused on another", "[alloc][streams]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  const Allocation on1 = allocator.allocate(512, 1);  // segment [B, B+2MiB), stream 1
  allocator.free(on1.handle);                         // whole segment free, cached for stream 1
  // Stream 0 (below stream 1 in the pool's order) and stream 2 (above it)
  // each need a segment of their own: B+2MiB, then B+4MiB.
  CHECK(allocator.allocate(512, 0).address == B + 2 * kMiB);
  CHECK(allocator.allocate(512, 2).address == B + 4 * kMiB);
  CHECK(allocator.counters().reserved.current == 6 * kMiB);
  // Stream 1 still gets its cached block back.
  CHECK(allocator.allocate(512, 1).address == B);
  const auto segments = allocator.snapshot();
  REQUIRE(segments.size() == 3);
  CHECK(segments[0].stream == 1);
  CHECK(segments[1].stream == 0);
  CHECK(segments[2].stream == 2);
}

TEST_CASE("a block freed with a pending event is not reused until the event completes",
          "[alloc][streams]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  const Allocation x = allocator.allocate(512, 0);  // [B, B+512)
  allocator.free(x.handle, {7});
  // allocated drops at free(); the block stays active and reserved.
  const Counters& c = allocator.counters();
  CHECK(c.allocated.current == 0);
  CHECK(c.active.current == 512);
  CHECK(c.requested.current == 512);
  CHECK(c.reserved.current == 2 * kMiB);
  CHECK(allocator.snapshot()[0].blocks[0].pending);
  // The next 512 B request does not get B: it gets the remainder at B+512.
  const Allocation y = allocator.allocate(512, 0);
  CHECK(y.address == B + 512);
  CHECK(allocator.event_completed(8) == 0);  // nobody waits on 8
  CHECK(allocator.event_completed(7) == 1);
  CHECK(c.active.current == 512);  // y only
  CHECK(c.requested.current == 512);
  CHECK(allocator.outstanding_events() == 0);
  // Now B is reusable (y at B+512 stops it merging with the tail).
  CHECK(allocator.allocate(512, 0).address == B);
}

TEST_CASE("a block waiting on two events needs both", "[alloc][streams]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  const Allocation x = allocator.allocate(512, 0);
  const Allocation fence = allocator.allocate(512, 0);  // keeps x from merging with the tail
  allocator.free(x.handle, std::vector<EventId>{1, 2});
  CHECK(allocator.event_completed(2) == 0);
  CHECK(allocator.snapshot()[0].blocks[0].pending);
  CHECK(allocator.event_completed(1) == 1);
  CHECK_FALSE(allocator.snapshot()[0].blocks[0].pending);
  (void)fence;
}

TEST_CASE("completing an event coalesces the block with its free neighbours", "[alloc][streams]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  const Allocation a = allocator.allocate(512, 0);  // [B, B+512)
  const Allocation b = allocator.allocate(512, 0);  // [B+512, B+1024), tail free after
  allocator.free(a.handle, {5});
  allocator.free(b.handle);  // b merges with the tail, not with pending a
  REQUIRE(allocator.snapshot()[0].blocks.size() == 2);
  allocator.event_completed(5);  // a merges with b+tail: the segment is one free block
  const auto segment = allocator.snapshot()[0];
  REQUIRE(segment.blocks.size() == 1);
  CHECK(segment.blocks[0].bytes == 2 * kMiB);
  allocator.empty_cache();
  CHECK(allocator.counters().reserved.current == 0);
}

TEST_CASE("record_stream: free() records one event per other stream and waits for it",
          "[alloc][streams]") {
  NullBacking backing;
  CachingAllocator allocator(backing);
  FakeEventSource events;
  const Allocation x = allocator.allocate(512, 0);
  CHECK_THROWS_AS(allocator.record_stream(x.handle, 1), UsageError);  // no EventSource yet
  allocator.set_event_source(&events);
  allocator.record_stream(x.handle, 0);  // own stream: ignored
  allocator.record_stream(x.handle, 1);
  allocator.record_stream(x.handle, 1);  // same stream twice: one event
  allocator.record_stream(x.handle, 2);
  allocator.allocate(512, 0);  // fence at B+512
  allocator.free(x.handle);
  CHECK(events.recorded_streams == std::vector<StreamId>{1, 2});  // events 100 and 101
  CHECK(allocator.outstanding_events() == 2);
  CHECK(allocator.allocate(512, 0).address == B + 1024);  // B still pending
  CHECK(allocator.event_completed(100) == 0);
  CHECK(allocator.event_completed(101) == 1);
  CHECK(allocator.allocate(512, 0).address == B);
  // A block only used on its own stream is reusable at once.
  const Allocation y = allocator.allocate(512, 3);
  allocator.record_stream(y.handle, 3);
  allocator.free(y.handle);
  CHECK(events.recorded_streams.size() == 2);
  CHECK(allocator.counters().active.current == allocator.counters().allocated.current);
}
