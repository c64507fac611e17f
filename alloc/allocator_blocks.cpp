// Block slots, the per-pool free sets, splitting, coalescing and segments
// (PyTorch's get_free_block, alloc_found_block, free_block/try_merge_blocks,
// alloc_block, release_blocks/release_block).
#include <algorithm>
#include <cassert>

#include "alloc/caching_allocator.h"
#include "alloc/counter_math.h"

namespace shardscope::alloc {

using detail::add_bytes;
using detail::sub_bytes;

uint32_t CachingAllocator::new_block() {
  if (free_block_slots_.empty()) {
    blocks_.emplace_back();
    return static_cast<uint32_t>(blocks_.size() - 1);
  }
  const uint32_t index = free_block_slots_.back();
  free_block_slots_.pop_back();
  Block& block = blocks_[index];
  // Keep the generation (stale handles must stay stale) and the capacity of
  // stream_uses (no churn).
  const uint32_t generation = block.generation;
  std::vector<StreamId> uses = std::move(block.stream_uses);
  uses.clear();
  block = Block{};
  block.generation = generation;
  block.stream_uses = std::move(uses);
  return index;
}

void CachingAllocator::delete_block(uint32_t index) {
  Block& block = blocks_[index];
  block.allocated = false;
  block.segment = kNone;
  block.prev = block.next = kNone;
  free_block_slots_.push_back(index);
}

void CachingAllocator::pool_insert(uint32_t index) {
  const Block& block = blocks_[index];
  const FreeKey key{block.stream, block.size, block.address, index};
  FreeSet& pool = pool_of(block);
  if (spare_node_) {
    spare_node_.value() = key;
    const auto result = pool.insert(std::move(spare_node_));
    assert(result.inserted);
    (void)result;
  } else {
    const bool inserted = pool.insert(key).second;
    assert(inserted);
    (void)inserted;
  }
}

void CachingAllocator::pool_erase(uint32_t index) {
  const Block& block = blocks_[index];
  FreeSet& pool = pool_of(block);
  const auto it = pool.find(FreeKey{block.stream, block.size, block.address, index});
  assert(it != pool.end() && it->block == index);
  spare_node_ = pool.extract(it);
}

uint32_t CachingAllocator::take_best_fit(FreeSet& pool, StreamId stream, uint64_t size) {
  // Smallest block of this stream with size >= `size`, lowest address among
  // equals. With max_split_size unlimited (PyTorch's default) any larger
  // block of the pool qualifies, however much larger.
  const auto it = pool.lower_bound(FreeKey{stream, size, 0, kNone});
  if (it == pool.end() || it->stream != stream) return kNone;
  const uint32_t index = it->block;
  spare_node_ = pool.extract(it);
  return index;
}

void CachingAllocator::split(uint32_t index, uint64_t size) {
  // The front keeps the slot (so a segment's head block never changes); the
  // remainder is a new free block right after it.
  const uint32_t rest = new_block();
  Block& block = blocks_[index];
  Block& remainder = blocks_[rest];
  remainder.address = block.address + size;
  remainder.size = block.size - size;
  remainder.stream = block.stream;
  remainder.small = block.small;
  remainder.segment = block.segment;
  remainder.prev = index;
  remainder.next = block.next;
  if (block.next != kNone) blocks_[block.next].prev = rest;
  block.next = rest;
  block.size = size;
  pool_insert(rest);
}

void CachingAllocator::merge_and_cache(uint32_t index) {
  // Free and not waiting for events: such a block is in its pool.
  const auto cached = [this](uint32_t other) {
    return other != kNone && !blocks_[other].allocated && blocks_[other].event_count == 0;
  };
  const uint32_t prev = blocks_[index].prev;
  if (cached(prev)) {  // [prev index] -> prev (the lower block survives)
    pool_erase(prev);
    const uint32_t next = blocks_[index].next;
    blocks_[prev].size += blocks_[index].size;
    blocks_[prev].next = next;
    if (next != kNone) blocks_[next].prev = prev;
    delete_block(index);
    index = prev;
  }
  const uint32_t next = blocks_[index].next;
  if (cached(next)) {  // [index next] -> index
    pool_erase(next);
    const uint32_t after = blocks_[next].next;
    blocks_[index].size += blocks_[next].size;
    blocks_[index].next = after;
    if (after != kNone) blocks_[after].prev = index;
    delete_block(next);
  }
  pool_insert(index);
}

uint32_t CachingAllocator::new_segment(uint64_t bytes, StreamId stream, bool small, uint32_t tag) {
  const std::optional<Address> base = backing_.reserve(bytes);
  if (!base) return kNone;
  uint32_t segment_index;
  if (free_segment_slots_.empty()) {
    segments_.emplace_back();
    segment_index = static_cast<uint32_t>(segments_.size() - 1);
  } else {
    segment_index = free_segment_slots_.back();
    free_segment_slots_.pop_back();
  }
  const uint32_t index = new_block();
  Block& block = blocks_[index];
  block.address = *base;
  block.size = bytes;
  block.stream = stream;
  block.small = small;
  block.segment = segment_index;
  Segment& segment = segments_[segment_index];
  segment = Segment{};
  segment.base = *base;
  segment.size = bytes;
  segment.stream = stream;
  segment.tag = tag;
  segment.head = index;
  segment.small = small;
  segment.live = true;
  add_bytes(counters_.reserved, bytes);
  ++stats_.segment_allocs;
  emit(EventKind::segment_alloc, stream, tag, *base, *base, bytes, 0);
  return index;
}

void CachingAllocator::release_segment(uint32_t segment_index) {
  Segment& segment = segments_[segment_index];
  assert(segment.live);
  backing_.release(segment.base, segment.size);
  sub_bytes(counters_.reserved, segment.size);
  ++stats_.segment_releases;
  delete_block(segment.head);
  segment.live = false;
  segment.head = kNone;
  free_segment_slots_.push_back(segment_index);
  emit(EventKind::segment_release, segment.stream, segment.tag, segment.base, segment.base,
       segment.size, 0);
}

void CachingAllocator::release_cached_segments() {
  synchronize_events();
  if (config_.expandable_segments) unmap_free_tails();
  // Only unsplit free blocks are whole segments; PyTorch walks large then small.
  for (FreeSet* pool : {&large_pool_, &small_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      const Block& block = blocks_[it->block];
      if (block.prev == kNone && block.next == kNone && !segments_[block.segment].expandable) {
        const uint32_t segment_index = block.segment;
        it = pool->erase(it);
        release_segment(segment_index);
      } else {
        ++it;
      }
    }
  }
}

std::vector<SegmentInfo> CachingAllocator::snapshot() const {
  std::vector<SegmentInfo> result;
  for (const Segment& segment : segments_) {
    if (!segment.live || (segment.expandable && segment.size == 0)) continue;
    SegmentInfo info;
    info.base = segment.base;
    info.bytes = segment.size;
    info.stream = segment.stream;
    info.small_pool = segment.small;
    info.expandable = segment.expandable;
    for (uint32_t index = segment.head; index != kNone; index = blocks_[index].next) {
      const Block& block = blocks_[index];
      info.blocks.push_back(BlockInfo{block.address, block.size, block.requested, block.allocated,
                                      block.event_count > 0, block.tag});
    }
    result.push_back(std::move(info));
  }
  std::sort(result.begin(), result.end(),
            [](const SegmentInfo& a, const SegmentInfo& b) { return a.base < b.base; });
  return result;
}

}  // namespace shardscope::alloc
