// When each emulated collective starts and when it is due: the bookkeeping of
// EmulatedCommunicator (emulated_communicator.h) without CUDA or threads, so
// that it is tested everywhere. Not thread-safe: the communicator calls it
// under its state lock. Times are host-clock nanoseconds.
//
// Rules (those of a NCCL communicator, the simulator and the CPU engine):
//  - one process group runs one collective at a time, in issue order;
//  - a collective starts when its stream has reached it and the previous
//    collective of its group was released, and is due duration_ns later;
//  - collectives of different groups run concurrently.
// After release_all() (abort, destruction) nothing waits any more: every
// collective reached so far is released at that time, and one reached later
// is released as it is reached.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace shardscope::engine::cuda {

class CollectiveTurns {
 public:
  struct Turn {
    int group = 0;
    int64_t duration_ns = 0;
    bool reached = false;
    int64_t start_ns = 0;     // 0 = not started
    int64_t released_ns = 0;  // 0 = not released
  };

  // A new collective of `group` (ids 0, 1, 2, ... in issue order).
  size_t issue(int group, int64_t duration_ns);
  // The last issued collective will never be reached (its stream never got
  // the marker): out of its group's turn, released at `now`.
  void withdraw(size_t id, int64_t now);
  // Its stream reached collective `id` at `now`: it starts now when its group
  // is idle (or everything was released), else when its turn comes.
  void reached(size_t id, int64_t now);
  // The started, unreleased collective due first (ties: lower id), as
  // (due_ns, id); nullopt when none is running.
  std::optional<std::pair<int64_t, size_t>> next_due() const;
  // Releases running collective `id` at `now` (its due time, or earlier on
  // request) and starts the next collective of its group if that one was
  // reached already.
  void release(size_t id, int64_t now);
  // Releases everything reached and not released at `now`; collectives
  // reached later are released as they are reached.
  void release_all(int64_t now);

  const Turn& turn(size_t id) const { return turns_.at(id); }
  size_t size() const { return turns_.size(); }

 private:
  void start(size_t id, int64_t now);

  std::deque<Turn> turns_;
  std::map<int, std::deque<size_t>> waiting_;  // per group: unreleased ids, issue order
  std::set<std::pair<int64_t, size_t>> due_;   // running: (due_ns, id)
  bool released_all_ = false;
};

}  // namespace shardscope::engine::cuda
