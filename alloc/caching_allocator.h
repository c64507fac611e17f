// PyTorch CUDACachingAllocator's policy (c10/cuda/CUDACachingAllocator.cpp,
// default configuration) over an abstract Backing; docs/allocator.md has the
// rules, the API and what is not implemented.
//
// Caching mode, per allocate(bytes, stream):
//   1. size = round_size(bytes); pool = small (size <= 1 MiB) or large.
//   2. Best fit among the pool's free blocks *of the same stream*: smallest
//      size >= size, then lowest address (a std::set ordered by
//      (stream, size, address); O(log n)).
//   3. None: obtain a segment of allocation_size(size) from the backing. If
//      the backing refuses: EventSource::synchronize() on the outstanding
//      events (if an EventSource is set and it can), release every cached
//      segment that is entirely free (all streams, both pools), obtain the
//      segment again; if refused, throw OutOfMemory. (As in PyTorch, the
//      retry does not search the pools again.)
//   4. Split the block when the remainder is >= 512 B (small pool) or
//      > 1 MiB (large pool); the remainder goes back to the pool.
// free(handle) drops `allocated` at once; the block becomes reusable (and
// coalesces with free neighbours of its segment) once the events it waits
// on have completed: those recorded by free() for the streams given to
// record_stream(), and those passed to free() explicitly.
//
// Exact mode: every allocation is its own backing segment of exactly the
// requested bytes, released as soon as the block is reusable.
//
// Not thread-safe: one allocator per executor thread (device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <unordered_map>
#include <vector>

#include "alloc/backing.h"
#include "alloc/errors.h"
#include "alloc/observer.h"
#include "alloc/policy.h"
#include "alloc/types.h"

namespace shardscope::alloc {

enum class Mode : uint8_t {
  caching,  // PyTorch's caching allocator
  exact,    // no caching: one backing allocation of exactly the requested bytes each
};

struct AllocatorConfig {
  Mode mode = Mode::caching;
  /// PyTorch's expandable_segments:True (caching mode; docs/allocator.md,
  /// "Expandable segments"): one segment per stream and pool that grows by
  /// pages. Needs a backing whose addresses are not used (NullBacking): the
  /// constructor throws UnsupportedConfig otherwise, and in exact mode.
  bool expandable_segments = false;
};

/// The executor's side of cross-stream reuse (PyTorch's insert_events and
/// synchronize_and_free_events). Needed for record_stream(); optional for
/// executors that pass events to free() explicitly. Its methods must not
/// throw nor call back into the allocator.
class EventSource {
 public:
  virtual ~EventSource() = default;
  /// Records an event on `stream` after all the work issued to it so far and
  /// returns its id. free() calls it once per stream given to record_stream()
  /// for that block; the executor reports completion with event_completed().
  virtual EventId record_event(StreamId stream) = 0;
  /// Out-of-memory path: block the host until all of `outstanding` (ascending
  /// ids) have completed, advancing the executor's clock (set_time) as it
  /// must. Return true when done: the allocator then treats them all as
  /// completed (later event_completed() calls for them are ignored). The
  /// default cannot synchronize and returns false.
  virtual bool synchronize(const std::vector<EventId>& outstanding) {
    (void)outstanding;
    return false;
  }
};

struct Allocation {
  Handle handle;
  Address address = 0;  // segment base + offset
  uint64_t bytes = 0;   // block size: rounded (caching mode) or exact
};

/// A block of a segment, as snapshot() sees it.
struct BlockInfo {
  Address address = 0;
  uint64_t bytes = 0;
  uint64_t requested_bytes = 0;  // of the last allocation (0 once reusable)
  bool allocated = false;
  bool pending = false;  // freed, waiting for events
  uint32_t tag = 0;
};

struct SegmentInfo {
  Address base = 0;
  uint64_t bytes = 0;  // expandable: the mapped bytes
  StreamId stream = 0;
  bool small_pool = false;  // exact mode: false
  bool expandable = false;
  std::vector<BlockInfo> blocks;  // by address, covering the segment
};

class CachingAllocator {
 public:
  /// `backing` must outlive the allocator. Throws UnsupportedConfig.
  explicit CachingAllocator(Backing& backing, AllocatorConfig config = {});
  /// Returns every segment to the backing, live blocks included (no events).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// Not owned; nullptr = none.
  void set_observer(Observer* observer) { observer_ = observer; }
  void set_event_source(EventSource* source) { event_source_ = source; }
  /// The time stamped on the events that follow.
  void set_time(TimeNs now_ns) { now_ns_ = now_ns; }
  TimeNs time() const { return now_ns_; }

  /// Throws OutOfMemory. `tag` is carried to the observer (a buffer category).
  Allocation allocate(uint64_t bytes, StreamId stream, uint32_t tag = 0);

  /// Marks the block as used by `stream` (torch.Tensor.record_stream): its
  /// free() will record an event on `stream` and wait for it. Uses on the
  /// block's own stream are ignored. Throws InvalidHandle, and UsageError
  /// when no EventSource is set.
  void record_stream(Handle handle, StreamId stream);

  /// Frees a live block. `pending`: events that must complete before the
  /// block is reused, on top of the record_stream ones. Pass only events not
  /// yet reported by event_completed(): an id already reported would keep
  /// the block pending until a synchronize. Throws InvalidHandle for a handle
  /// that is not live (double free).
  void free(Handle handle) { free(handle, nullptr, 0); }
  void free(Handle handle, std::initializer_list<EventId> pending) {
    free(handle, pending.begin(), pending.size());
  }
  void free(Handle handle, const std::vector<EventId>& pending) {
    free(handle, pending.data(), pending.size());
  }
  void free(Handle handle, const EventId* pending, size_t pending_count);

  /// The executor says `event` completed: blocks waiting on nothing else
  /// become reusable now (coalescing). Returns how many; an id nobody waits
  /// on is ignored (returns 0).
  size_t event_completed(EventId event);

  /// PyTorch's emptyCache(): synchronize (if the EventSource can), then
  /// release every cached segment that is entirely free.
  void empty_cache();

  /// Throws InvalidHandle.
  Address address(Handle handle) const { return live_block(handle).address; }
  bool is_live(Handle handle) const;

  const Counters& counters() const { return counters_; }
  const AllocatorStats& stats() const { return stats_; }
  /// Peaks := current values (torch.cuda.reset_peak_memory_stats()).
  void reset_peaks();

  /// Every segment with its blocks, by base address. O(blocks).
  std::vector<SegmentInfo> snapshot() const;
  /// Events some freed block still waits on.
  size_t outstanding_events() const { return pending_.size(); }

  const AllocatorConfig& config() const { return config_; }
  Backing& backing() const { return backing_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

  struct Block {
    Address address = 0;
    uint64_t size = 0;
    uint64_t requested = 0;
    StreamId stream = 0;
    uint32_t tag = 0;
    uint32_t prev = kNone;  // neighbours in the same segment, by address
    uint32_t next = kNone;
    uint32_t segment = kNone;
    uint32_t generation = 0;   // bumped per allocation from this slot (Handle check)
    uint32_t event_count = 0;  // events to complete before reuse
    bool allocated = false;
    bool small = false;
    std::vector<StreamId> stream_uses;  // record_stream() streams; cleared by free()
  };
  struct Segment {
    Address base = 0;
    uint64_t size = 0;
    StreamId stream = 0;
    uint32_t tag = 0;
    uint32_t head = kNone;  // lowest-address block; stays the head (merges keep the lower block)
    bool small = false;
    bool live = false;
    // Expandable segments: `size` is the mapped bytes from `base` (a
    // virtual range of the allocator's own, kExpandableBase on); each page
    // is a backing reservation, in mapping order.
    bool expandable = false;
    std::vector<Address> pages;
  };
  /// Virtual ranges of expandable segments: 2^52 + i x 2^46 (64 TiB each,
  /// beyond any device), clear of NullBacking's addresses from 2^40.
  static constexpr Address kExpandableBase = Address{1} << 52;
  static constexpr int kExpandableRangeShift = 46;
  // Free-pool key: (stream, size, address) as PyTorch's BlockComparatorSize.
  struct FreeKey {
    StreamId stream;
    uint64_t size;
    Address address;
    uint32_t block;
  };
  struct FreeKeyLess {
    bool operator()(const FreeKey& a, const FreeKey& b) const {
      if (a.stream != b.stream) return a.stream < b.stream;
      if (a.size != b.size) return a.size < b.size;
      return a.address < b.address;
    }
  };
  using FreeSet = std::set<FreeKey, FreeKeyLess>;
  struct Waiter {  // one block waiting on one event; singly linked per event
    uint32_t block;
    uint32_t next;
  };
  struct WaiterList {
    uint32_t head;
    uint32_t tail;
  };

  // allocator_blocks.cpp: slots, pools, splitting, merging, segments.
  uint32_t new_block();
  void delete_block(uint32_t index);
  FreeSet& pool_of(const Block& block) { return block.small ? small_pool_ : large_pool_; }
  void pool_insert(uint32_t index);
  void pool_erase(uint32_t index);
  uint32_t take_best_fit(FreeSet& pool, StreamId stream, uint64_t size);
  void split(uint32_t index, uint64_t size);
  void merge_and_cache(uint32_t index);
  uint32_t new_segment(uint64_t bytes, StreamId stream, bool small, uint32_t tag);
  void release_segment(uint32_t segment);
  void release_cached_segments();

  // expandable_segments.cpp: PyTorch's ExpandableSegment and
  // try_allocate_expandable_block / release of free pages.
  uint32_t expandable_segment(StreamId stream, bool small, uint32_t tag);
  uint32_t grow_expandable(uint64_t bytes, uint64_t rounded, StreamId stream, bool small,
                           uint32_t tag);
  bool map_pages(uint32_t segment, uint64_t count);
  void unmap_free_tails();

  // allocator_events.cpp: pending events.
  void add_waiter(EventId event, uint32_t block);
  void synchronize_events();

  // caching_allocator.cpp
  const Block& live_block(Handle handle) const;
  uint32_t obtain_segment_or_throw(uint64_t bytes, uint64_t rounded, uint64_t segment_bytes,
                                   StreamId stream, bool small, uint32_t tag);
  Allocation hand_out(uint32_t index, uint64_t bytes, StreamId stream, uint32_t tag);
  void make_reusable(uint32_t index);
  void emit(EventKind kind, StreamId stream, uint32_t tag, Address address, Address segment_base,
            uint64_t bytes, uint64_t requested_bytes);

  Backing& backing_;
  AllocatorConfig config_;
  Observer* observer_ = nullptr;
  EventSource* event_source_ = nullptr;
  TimeNs now_ns_ = 0;

  std::vector<Block> blocks_;
  std::vector<uint32_t> free_block_slots_;
  std::vector<Segment> segments_;
  std::vector<uint32_t> free_segment_slots_;
  std::vector<uint32_t> expandable_;  // expandable segments, in creation order
  FreeSet small_pool_;
  FreeSet large_pool_;
  FreeSet::node_type spare_node_;  // reused by pool_insert: no node churn on split/merge

  std::unordered_map<EventId, WaiterList> pending_;  // event -> its waiters, in free order
  std::vector<Waiter> waiters_;
  std::vector<uint32_t> free_waiter_slots_;

  Counters counters_;
  AllocatorStats stats_;
};

}  // namespace shardscope::alloc
