// The collective interface of the engine: what the shared-memory CPU
// communicator implements now and the NCCL communicator will implement.
//
// Groups are fixed when the communicator is made (the schedule's process
// groups: global ranks, ascending). Every collective names a group the
// calling rank belongs to; within a group, a member's rank index is its
// position in `ranks`. Calls on one group must not overlap on a rank (the
// caller serialises them) and must come in the same order on every member;
// calls on different groups may run concurrently from different threads.
//
// Reductions are deterministic: element i of a result is reduced over the
// group's members in ascending rank order, in float (sum) and divided by the
// group size for avg, so results are bit-identical run to run.
//
// Sizes (bytes_per_rank, count, bytes, root) must be equal on every member of
// a call; implementations check this and throw rather than corrupt data.
//
// Failure: a peer that died, a peer that reported an error (abort()), or a
// wait longer than the timeout makes every pending and later call throw
// CommError naming the rank and the collective; never a hang. Calling on a
// group the rank is not in is a CommError too.
//
// Implementations: shm_communicator.h (CPU, processes or threads of one host).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardscope::engine::comm {

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ReduceOp : uint8_t { sum, avg };

struct Group {
  std::string name;        // "world", "shard0", "replica1", ... (for messages)
  std::vector<int> ranks;  // global ranks, ascending
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual const std::vector<Group>& groups() const = 0;

  // out[i * bytes_per_rank ...] = member i's `in` (in may alias out's own slot).
  virtual void all_gather(int group, const void* in, void* out, size_t bytes_per_rank) = 0;
  // out[count] = reduce over members of in[my_index * count ... + count]; in holds
  // group_size * count floats. out may alias in + my_index * count (in place).
  virtual void reduce_scatter(int group, const float* in, float* out, size_t count,
                              ReduceOp op) = 0;
  // data[count] = reduce over members of their data (in place).
  virtual void all_reduce(int group, float* data, size_t count, ReduceOp op) = 0;
  // data = root member's data; root is a global rank in the group.
  virtual void broadcast(int group, void* data, size_t bytes, int root) = 0;
  virtual void barrier(int group) = 0;

  // Marks this rank failed with a message: peers' pending and later calls
  // throw CommError naming this rank and the message; so do this rank's later
  // calls. Never throws.
  virtual void abort(const std::string& message) = 0;
};

}  // namespace shardscope::engine::comm
