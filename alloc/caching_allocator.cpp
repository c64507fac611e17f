// CachingAllocator's public entry points: allocate, free, record_stream, the
// out-of-memory path and the counters. Blocks and segments are in
// allocator_blocks.cpp, pending events in allocator_events.cpp.
#include "alloc/caching_allocator.h"

#include <string>

#include "alloc/counter_math.h"

namespace shardscope::alloc {

using detail::add_bytes;
using detail::sub_bytes;

CachingAllocator::CachingAllocator(Backing& backing, AllocatorConfig config)
    : backing_(backing), config_(config) {
  if (config_.expandable_segments && config_.mode == Mode::exact)
    throw UnsupportedConfig("expandable_segments applies to the caching mode, not exact mode");
  if (config_.expandable_segments && backing_.addresses_are_real())
    throw UnsupportedConfig(
        "expandable_segments needs segments that grow in place (PyTorch maps pages into one "
        "reserved address range with cuMemMap); this backing hands out real memory that "
        "cannot grow, so only the simulator (NullBacking) models expandable_segments:True");
}

CachingAllocator::~CachingAllocator() {
  for (const Segment& segment : segments_) {
    if (!segment.live) continue;
    if (!segment.expandable) {
      backing_.release(segment.base, segment.size);
      continue;
    }
    const uint64_t page = expandable_page_size(segment.small);
    for (Address p : segment.pages) backing_.release(p, page);
  }
}

Allocation CachingAllocator::allocate(uint64_t bytes, StreamId stream, uint32_t tag) {
  if (bytes >= kMaxRequest) {
    ++stats_.ooms;
    emit(EventKind::out_of_memory, stream, tag, 0, 0, bytes, bytes);
    throw OutOfMemory({bytes, bytes, bytes, counters_.allocated.current, counters_.reserved.current,
                       backing_.capacity_bytes(), stream});
  }
  if (config_.mode == Mode::exact) {
    const uint32_t index = obtain_segment_or_throw(bytes, bytes, bytes, stream, false, tag);
    return hand_out(index, bytes, stream, tag);
  }
  const uint64_t size = round_size(bytes);
  const bool small = is_small_size(size);
  uint32_t index = take_best_fit(small ? small_pool_ : large_pool_, stream, size);
  if (index == kNone) {
    index = config_.expandable_segments
                ? grow_expandable(bytes, size, stream, small, tag)
                : obtain_segment_or_throw(bytes, size, allocation_size(size), stream, small, tag);
  }
  if (should_split(small, blocks_[index].size, size, config_.expandable_segments))
    split(index, size);
  return hand_out(index, bytes, stream, tag);
}

uint32_t CachingAllocator::obtain_segment_or_throw(uint64_t bytes, uint64_t rounded,
                                                   uint64_t segment_bytes, StreamId stream,
                                                   bool small, uint32_t tag) {
  uint32_t index = new_segment(segment_bytes, stream, small, tag);
  if (index != kNone) return index;
  // PyTorch's release_cached_blocks(): synchronize the outstanding events,
  // release every entirely free cached segment, then cudaMalloc again
  // (without searching the pools again).
  ++stats_.alloc_retries;
  if (config_.mode == Mode::caching) {
    release_cached_segments();
  } else {
    synchronize_events();  // pending exact-mode blocks release their segments
  }
  index = new_segment(segment_bytes, stream, small, tag);
  if (index != kNone) return index;
  ++stats_.ooms;
  emit(EventKind::out_of_memory, stream, tag, 0, 0, rounded, bytes);
  throw OutOfMemory({bytes, rounded, segment_bytes, counters_.allocated.current,
                     counters_.reserved.current, backing_.capacity_bytes(), stream});
}

Allocation CachingAllocator::hand_out(uint32_t index, uint64_t bytes, StreamId stream,
                                      uint32_t tag) {
  Block& block = blocks_[index];
  block.allocated = true;
  block.requested = bytes;
  block.tag = tag;
  ++block.generation;
  add_bytes(counters_.allocated, block.size);
  add_bytes(counters_.active, block.size);
  add_bytes(counters_.requested, bytes);
  ++stats_.allocations;
  emit(EventKind::allocate, stream, tag, block.address, segments_[block.segment].base, block.size,
       bytes);
  return Allocation{Handle{index, block.generation}, block.address, block.size};
}

const CachingAllocator::Block& CachingAllocator::live_block(Handle handle) const {
  if (!is_live(handle)) {
    throw InvalidHandle("allocator handle {slot " + std::to_string(handle.slot) + ", generation " +
                        std::to_string(handle.generation) +
                        "} is not live: never allocated, or already freed (double free / use "
                        "after free)");
  }
  return blocks_[handle.slot];
}

bool CachingAllocator::is_live(Handle handle) const {
  return handle.slot < blocks_.size() && blocks_[handle.slot].allocated &&
         blocks_[handle.slot].generation == handle.generation;
}

void CachingAllocator::record_stream(Handle handle, StreamId stream) {
  const Block& block = live_block(handle);
  if (stream == block.stream) return;  // uses on the allocation stream need no event
  if (event_source_ == nullptr) {
    throw UsageError("record_stream needs an EventSource (set_event_source) to record events");
  }
  std::vector<StreamId>& uses = blocks_[handle.slot].stream_uses;
  for (StreamId used : uses) {
    if (used == stream) return;
  }
  uses.push_back(stream);
}

void CachingAllocator::free(Handle handle, const EventId* pending, size_t pending_count) {
  live_block(handle);  // throws InvalidHandle
  const uint32_t index = handle.slot;
  if (!blocks_[index].stream_uses.empty() && event_source_ == nullptr) {
    throw UsageError("free of a block given to record_stream, but the EventSource was removed");
  }
  Block& block = blocks_[index];
  block.allocated = false;
  sub_bytes(counters_.allocated, block.size);
  ++stats_.frees;
  emit(EventKind::free, block.stream, block.tag, block.address, segments_[block.segment].base,
       block.size, block.requested);
  // PyTorch's insert_events(): one event per stream that used the block.
  for (StreamId stream : blocks_[index].stream_uses) {
    add_waiter(event_source_->record_event(stream), index);
  }
  blocks_[index].stream_uses.clear();
  for (size_t i = 0; i < pending_count; ++i) add_waiter(pending[i], index);
  if (blocks_[index].event_count == 0) make_reusable(index);
}

void CachingAllocator::make_reusable(uint32_t index) {
  Block& block = blocks_[index];
  sub_bytes(counters_.active, block.size);
  sub_bytes(counters_.requested, block.requested);
  emit(EventKind::reusable, block.stream, block.tag, block.address, segments_[block.segment].base,
       block.size, block.requested);
  block.requested = 0;
  if (config_.mode == Mode::exact) {
    release_segment(block.segment);
  } else {
    merge_and_cache(index);
  }
}

void CachingAllocator::empty_cache() {
  if (config_.mode == Mode::caching) {
    release_cached_segments();
  } else {
    synchronize_events();
  }
}

void CachingAllocator::reset_peaks() {
  for (Counter* counter :
       {&counters_.allocated, &counters_.active, &counters_.requested, &counters_.reserved}) {
    counter->peak = counter->current;
  }
}

void CachingAllocator::emit(EventKind kind, StreamId stream, uint32_t tag, Address address,
                            Address segment_base, uint64_t bytes, uint64_t requested_bytes) {
  if (observer_ == nullptr) return;
  AllocatorEvent event;
  event.kind = kind;
  event.time_ns = now_ns_;
  event.stream = stream;
  event.tag = tag;
  event.address = address;
  event.segment_base = segment_base;
  event.bytes = bytes;
  event.requested_bytes = requested_bytes;
  event.counters = counters_;
  observer_->on_event(event);
}

}  // namespace shardscope::alloc
