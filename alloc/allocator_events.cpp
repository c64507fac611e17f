// Delayed reuse across streams (PyTorch's insert_events, process_events and
// synchronize_and_free_events), with events named by the executor: a freed
// block waits on each of its events; when the last one completes it becomes
// reusable.
#include <algorithm>

#include "alloc/caching_allocator.h"

namespace shardscope::alloc {

void CachingAllocator::add_waiter(EventId event, uint32_t block) {
  uint32_t waiter;
  if (free_waiter_slots_.empty()) {
    waiters_.push_back(Waiter{block, kNone});
    waiter = static_cast<uint32_t>(waiters_.size() - 1);
  } else {
    waiter = free_waiter_slots_.back();
    free_waiter_slots_.pop_back();
    waiters_[waiter] = Waiter{block, kNone};
  }
  // Append, so that blocks become reusable in the order they were freed.
  const auto [it, inserted] = pending_.try_emplace(event, WaiterList{waiter, waiter});
  if (!inserted) {
    waiters_[it->second.tail].next = waiter;
    it->second.tail = waiter;
  }
  ++blocks_[block].event_count;
}

size_t CachingAllocator::event_completed(EventId event) {
  const auto it = pending_.find(event);
  if (it == pending_.end()) return 0;
  uint32_t waiter = it->second.head;
  pending_.erase(it);
  size_t reusable = 0;
  while (waiter != kNone) {
    const Waiter current = waiters_[waiter];
    free_waiter_slots_.push_back(waiter);
    waiter = current.next;
    if (--blocks_[current.block].event_count == 0) {
      make_reusable(current.block);
      ++reusable;
    }
  }
  return reusable;
}

void CachingAllocator::synchronize_events() {
  if (event_source_ == nullptr || pending_.empty()) return;
  std::vector<EventId> outstanding;
  outstanding.reserve(pending_.size());
  for (const auto& entry : pending_) outstanding.push_back(entry.first);
  std::sort(outstanding.begin(), outstanding.end());  // deterministic order
  if (!event_source_->synchronize(outstanding)) return;
  ++stats_.synchronizations;
  for (EventId event : outstanding) event_completed(event);
}

}  // namespace shardscope::alloc
