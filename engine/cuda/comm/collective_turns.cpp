#include "engine/cuda/comm/collective_turns.h"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace shardscope::engine::cuda {

size_t CollectiveTurns::issue(int group, int64_t duration_ns) {
  if (duration_ns < 0)
    throw std::invalid_argument("CollectiveTurns::issue: negative duration " +
                                std::to_string(duration_ns));
  turns_.push_back(Turn{group, duration_ns, false, 0, 0});
  const size_t id = turns_.size() - 1;
  if (!released_all_) waiting_[group].push_back(id);
  return id;
}

void CollectiveTurns::withdraw(size_t id, int64_t now) {
  Turn& t = turns_.at(id);
  std::deque<size_t>& queue = waiting_[t.group];
  if (!queue.empty() && queue.back() == id) queue.pop_back();
  t.released_ns = now;
}

void CollectiveTurns::start(size_t id, int64_t now) {
  Turn& t = turns_[id];
  t.start_ns = now;
  const int64_t due = t.duration_ns > INT64_MAX - now ? INT64_MAX : now + t.duration_ns;
  due_.insert({due, id});
}

void CollectiveTurns::reached(size_t id, int64_t now) {
  Turn& t = turns_.at(id);
  t.reached = true;
  if (released_all_) {
    t.start_ns = now;
    t.released_ns = now;
    return;
  }
  const std::deque<size_t>& queue = waiting_[t.group];
  if (!queue.empty() && queue.front() == id) start(id, now);
}

std::optional<std::pair<int64_t, size_t>> CollectiveTurns::next_due() const {
  if (due_.empty()) return std::nullopt;
  return *due_.begin();
}

void CollectiveTurns::release(size_t id, int64_t now) {
  Turn& t = turns_.at(id);
  if (t.start_ns == 0 || t.released_ns != 0)
    throw std::logic_error("CollectiveTurns::release: collective " + std::to_string(id) +
                           " is not running");
  const int64_t due =
      t.duration_ns > INT64_MAX - t.start_ns ? INT64_MAX : t.start_ns + t.duration_ns;
  due_.erase({due, id});
  t.released_ns = now;
  std::deque<size_t>& queue = waiting_[t.group];
  if (queue.empty() || queue.front() != id)
    throw std::logic_error("CollectiveTurns::release: collective " + std::to_string(id) +
                           " is not its group's running one");
  queue.pop_front();
  if (!queue.empty() && turns_[queue.front()].reached) start(queue.front(), now);
}

void CollectiveTurns::release_all(int64_t now) {
  for (auto& [group, queue] : waiting_) {
    for (size_t id : queue) {
      Turn& t = turns_[id];
      if (!t.reached) continue;  // released as it is reached
      if (t.start_ns == 0) t.start_ns = now;
      t.released_ns = now;
    }
    queue.clear();
  }
  due_.clear();
  released_all_ = true;
}

}  // namespace shardscope::engine::cuda
