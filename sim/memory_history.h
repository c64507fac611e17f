// The simulated allocator's history (SimOptions::allocator_history) and its
// conversion to PyTorch's memory snapshot (traces/memory_snapshot.h), which
// `simulate --memory-snapshot` writes for torch.cuda._memory_viz.
#pragma once

#include <cstdint>
#include <vector>

#include "alloc/observer.h"
#include "plan/graph.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "traces/memory_snapshot.h"

namespace shardscope::sim {

struct AllocatorHistory {
  std::vector<alloc::AllocatorEvent> events;  // in the order the allocator made them
  // Per event: the schedule buffer whose allocation or free caused it; -1
  // when none (a freed block becoming reusable as the op it waited on ends);
  // kBlasWorkspace for a cuBLAS workspace (sim/simulator.cpp's warm-up).
  std::vector<int32_t> buffers;
  static constexpr int32_t kBlasWorkspace = -2;
  uint64_t capacity_bytes = 0;  // the allocator's device capacity; 0 = unlimited
  // allocator.expandable_segments: segment events map and unmap pages at the
  // end of a segment (AllocatorEvent::segment_base) instead of whole segments.
  bool expandable_segments = false;
};

// Device 0's trace (alloc, free_requested, free_completed, segment_alloc,
// segment_free, oom; with expandable segments segment_map and segment_unmap
// instead of segment_alloc and segment_free, and one segment per mapped
// range, is_expandable, as CUDACachingAllocator's snapshot() reports them;
// time_us = simulated ns / 1000, rounded down) and the segments as the
// history leaves them. Every entry and block carries a
// one-frame stack: filename "shardscope <category>", line 0, name
// "<buffer name> [unit <unit>]" (plan::buffer_name), so memory_viz names
// what holds each block. Streams are the schedule's stream indices
// (Schedule::streams).
traces::MemorySnapshot memory_snapshot(const AllocatorHistory& history, const plan::Graph& graph,
                                       const plan::UnitPlan& units, const plan::Schedule& schedule);

}  // namespace shardscope::sim
