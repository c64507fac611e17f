// expandable_segments:True (c10/cuda/CUDACachingAllocator.cpp: ExpandableSegment,
// find_expandable_block, try_allocate_expandable_block, map_block,
// release_expandable_segment). One segment per (stream, pool) over a virtual
// range of its own; it grows at its end by whole pages (2 MiB in the small
// pool, 20 MiB in the large), each page one backing reservation. A request no
// free mapped block fits extends the segment: a free block at its end is
// used and only the missing bytes are mapped, rounded up to pages. Blocks
// split at >= 512 B in both pools (should_split) and merge with their
// neighbours as in a fixed segment. Freeing keeps pages mapped (reserved does
// not drop); empty_cache() and the out-of-memory retry unmap the whole pages
// of the free block at each segment's end.
#include <cassert>

#include "alloc/caching_allocator.h"
#include "alloc/counter_math.h"

namespace shardscope::alloc {

using detail::add_bytes;
using detail::sub_bytes;

uint32_t CachingAllocator::expandable_segment(StreamId stream, bool small, uint32_t tag) {
  for (uint32_t s : expandable_) {
    const Segment& segment = segments_[s];
    if (segment.stream == stream && segment.small == small) return s;
  }
  uint32_t index;
  if (free_segment_slots_.empty()) {
    segments_.emplace_back();
    index = static_cast<uint32_t>(segments_.size() - 1);
  } else {
    index = free_segment_slots_.back();
    free_segment_slots_.pop_back();
  }
  Segment& segment = segments_[index];
  segment = Segment{};
  segment.base = kExpandableBase + (Address{expandable_.size()} << kExpandableRangeShift);
  segment.stream = stream;
  segment.tag = tag;
  segment.small = small;
  segment.live = true;
  segment.expandable = true;
  expandable_.push_back(index);
  return index;
}

bool CachingAllocator::map_pages(uint32_t segment_index, uint64_t count) {
  const uint64_t page = expandable_page_size(segments_[segment_index].small);
  // All or nothing, as cuMemCreate failing midway unmaps what it mapped.
  std::vector<Address> got;
  for (uint64_t i = 0; i < count; ++i) {
    const std::optional<Address> p = backing_.reserve(page);
    if (!p) {
      for (Address a : got) backing_.release(a, page);
      return false;
    }
    got.push_back(*p);
  }
  Segment& segment = segments_[segment_index];
  const Address at = segment.base + segment.size;
  segment.pages.insert(segment.pages.end(), got.begin(), got.end());
  segment.size += count * page;
  add_bytes(counters_.reserved, count * page);
  stats_.segment_allocs += count;
  emit(EventKind::segment_alloc, segment.stream, segment.tag, at, segment.base, count * page, 0);
  return true;
}

uint32_t CachingAllocator::grow_expandable(uint64_t bytes, uint64_t rounded, StreamId stream,
                                           bool small, uint32_t tag) {
  const uint32_t s = expandable_segment(stream, small, tag);
  const uint64_t page = expandable_page_size(small);
  // The free block at the segment's end, if any, is extended.
  const auto tail = [this](uint32_t segment) {
    uint32_t last = kNone;
    for (uint32_t b = segments_[segment].head; b != kNone; b = blocks_[b].next) last = b;
    return last;
  };
  const auto free_tail_bytes = [&](uint32_t last) -> uint64_t {
    if (last == kNone || blocks_[last].allocated || blocks_[last].event_count > 0) return 0;
    return blocks_[last].size;
  };
  uint32_t last = tail(s);
  uint64_t have = free_tail_bytes(last);
  uint64_t pages = (rounded - have + page - 1) / page;
  if (!map_pages(s, pages)) {
    // PyTorch's release_cached_blocks: synchronize, free what can be freed,
    // retry the mapping once.
    ++stats_.alloc_retries;
    release_cached_segments();
    last = tail(s);
    have = free_tail_bytes(last);
    pages = (rounded - have + page - 1) / page;
    if (!map_pages(s, pages)) {
      ++stats_.ooms;
      emit(EventKind::out_of_memory, stream, tag, 0, 0, rounded, bytes);
      throw OutOfMemory({bytes, rounded, pages * page, counters_.allocated.current,
                         counters_.reserved.current, backing_.capacity_bytes(), stream});
    }
  }
  Segment& segment = segments_[s];
  const uint64_t added = pages * page;
  if (have > 0) {  // [free tail][new pages] -> one block
    pool_erase(last);
    blocks_[last].size += added;
    return last;
  }
  const uint32_t index = new_block();
  Block& block = blocks_[index];
  block.address = segment.base + segment.size - added;
  block.size = added;
  block.stream = stream;
  block.small = small;
  block.segment = s;
  block.prev = last;
  if (last != kNone)
    blocks_[last].next = index;
  else
    segment.head = index;
  return index;
}

void CachingAllocator::unmap_free_tails() {
  for (uint32_t s : expandable_) {
    Segment& segment = segments_[s];
    uint32_t last = kNone;
    for (uint32_t b = segment.head; b != kNone; b = blocks_[b].next) last = b;
    if (last == kNone || blocks_[last].allocated || blocks_[last].event_count > 0) continue;
    const uint64_t page = expandable_page_size(segment.small);
    // Whole pages inside the free tail block: from the first page boundary
    // at or after its start to the mapped end.
    const uint64_t start = blocks_[last].address - segment.base;
    const uint64_t first_page = (start + page - 1) / page;
    const uint64_t mapped_pages = segment.size / page;
    if (first_page >= mapped_pages) continue;
    const uint64_t count = mapped_pages - first_page;
    for (uint64_t i = 0; i < count; ++i) {
      backing_.release(segment.pages.back(), page);
      segment.pages.pop_back();
    }
    segment.size -= count * page;
    sub_bytes(counters_.reserved, count * page);
    stats_.segment_releases += count;
    emit(EventKind::segment_release, segment.stream, segment.tag, segment.base + segment.size,
         segment.base, count * page, 0);
    pool_erase(last);
    blocks_[last].size -= count * page;
    if (blocks_[last].size > 0) {
      pool_insert(last);
      continue;
    }
    const uint32_t prev = blocks_[last].prev;
    if (prev != kNone)
      blocks_[prev].next = kNone;
    else
      segment.head = kNone;
    delete_block(last);
  }
}

}  // namespace shardscope::alloc
