// What the allocator reports as it works: one event per allocation, free,
// block becoming reusable, segment allocation, segment release and
// out-of-memory, stamped with the time the executor last set and the
// counters after the event. This is the raw material of memory timelines
// (PyTorch's memory snapshot trace entries: ALLOC, FREE_REQUESTED,
// FREE_COMPLETED, SEGMENT_ALLOC, SEGMENT_FREE, OOM).
#pragma once

#include <cstdint>
#include <vector>

#include "alloc/types.h"

namespace shardscope::alloc {

enum class EventKind : uint8_t {
  allocate,         // a block was handed out
  free,             // the caller freed it; `allocated` dropped
  reusable,         // its pending events completed: back in the pool (or released, exact mode)
  segment_alloc,    // a segment was obtained from the backing
  segment_release,  // a segment was returned to the backing
  out_of_memory,    // allocate() is about to throw OutOfMemory
};
const char* event_kind_name(EventKind kind);

struct AllocatorEvent {
  EventKind kind = EventKind::allocate;
  TimeNs time_ns = 0;  // the allocator's time (set_time) when it happened
  StreamId stream = 0;
  uint32_t tag = 0;     // the caller's tag of the allocation (segments: of the one that made it)
  Address address = 0;  // block address; segment events: the segment base
  Address segment_base = 0;  // offset in the segment = address - segment_base
  uint64_t bytes = 0;  // block bytes (rounded), segment bytes, or for out_of_memory the block size
  uint64_t requested_bytes = 0;  // the caller's unrounded size (block events and out_of_memory)
  Counters counters;             // after the event
};

/// Receives events synchronously, inside the allocator call. It must not call
/// back into the allocator.
class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_event(const AllocatorEvent& event) = 0;
};

/// Keeps every event, in order (tests, traces of short runs).
class RecordingObserver final : public Observer {
 public:
  void on_event(const AllocatorEvent& event) override { events.push_back(event); }
  std::vector<AllocatorEvent> events;
};

}  // namespace shardscope::alloc
