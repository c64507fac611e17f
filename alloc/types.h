// Basic types of the alloc library: addresses, streams, events, handles and the
// byte counters PyTorch's CUDACachingAllocator reports (memory_stats()).
#pragma once

#include <cstdint>

namespace shardscope::alloc {

/// A byte address: segment base + offset. Under HostBacking it is a real
/// pointer; under NullBacking a fake one that never overlaps another.
using Address = std::uintptr_t;
/// A stream of the executor. Free blocks are cached per stream (PyTorch's
/// pools are keyed by stream), so a block freed on stream 0 never serves stream 1.
using StreamId = uint32_t;
/// Executor-chosen id of a point in some stream's work (a recorded event).
using EventId = uint64_t;
/// Time in ns, on the executor's clock; the allocator never reads a clock.
using TimeNs = int64_t;

/// Names one live allocation. The generation makes a handle that was freed
/// (or never issued) detectable even after its slot is reused.
struct Handle {
  uint32_t slot = UINT32_MAX;
  uint32_t generation = 0;

  bool operator==(const Handle& other) const {
    return slot == other.slot && generation == other.generation;
  }
  bool operator!=(const Handle& other) const { return !(*this == other); }
};

/// Current value and high-water mark of one byte counter.
struct Counter {
  uint64_t current = 0;
  uint64_t peak = 0;
};

/// Byte counters, named after PyTorch's memory_stats() keys.
struct Counters {
  /// Blocks handed out and not yet freed (rounded sizes). Drops at free(),
  /// even when the block still waits for other streams' events.
  Counter allocated;
  /// allocated + freed blocks still waiting for events (active_bytes).
  Counter active;
  /// Unrounded request sizes of active blocks (requested_bytes): like
  /// `active`, it drops when the block becomes reusable, not at free().
  Counter requested;
  /// Segments obtained from the backing and not yet released (reserved_bytes).
  Counter reserved;
};

/// Event counts (PyTorch's num_alloc_retries, num_ooms, num_device_alloc, ...).
struct AllocatorStats {
  uint64_t allocations = 0;       // successful allocate() calls
  uint64_t frees = 0;             // free() calls
  uint64_t segment_allocs = 0;    // backing reserve() calls that succeeded
  uint64_t segment_releases = 0;  // backing release() calls
  uint64_t alloc_retries = 0;     // allocations that had to release the cache and retry
  uint64_t ooms = 0;              // OutOfMemory errors thrown
  uint64_t synchronizations = 0;  // EventSource::synchronize() calls that completed events
};

}  // namespace shardscope::alloc
