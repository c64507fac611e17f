// The shared-memory CPU communicator: ranks on one host, as separate processes
// (a POSIX shm segment, open_shm_communicator) or as threads of one process
// (an anonymous shared mapping, make_thread_communicators). Both run the same
// code over the same layout (engine/comm/shm_layout.h).
//
// Segment life (processes). Rank 0 creates the named segment with
// O_CREAT|O_EXCL; a segment of that name that already exists is an error naming
// it, unless its header says its creator process is gone, in which case it is
// removed and created afresh. Ranks > 0 poll until the name exists, its header
// is ready and matches theirs (magic, version, world size, slot bytes, group
// table checksum), then claim their RankEntry. When every rank has attached,
// rank 0 unlinks the name: the memory lives while mapped and nothing is left in
// /dev/shm after the run, crashed or not. Any attach problem is a CommError
// naming the segment, the rank and the field, within the timeout.
//
// Protocol. Every collective on a group is a sequence of steps; a member's
// steps alternate between the two halves of its slot (step parity), counted
// over the group's whole life. One step:
//   1. write my StepDescriptor[parity] and my contribution into my slot half;
//   2. barrier: release-store my arrival epoch, wait until every member's
//      epoch >= mine (acquire), then check that every descriptor matches;
//   3. read what I need directly from the peers' slot halves (all_reduce of
//      >= 3 members and >= 64 KiB per step: each member reduces its 1/n piece
//      into its own slot, a second barrier, then copies the n pieces).
// A half written at step k is rewritten at step k + 2 only after the barrier
// of step k + 1, which no member reaches before it finished reading step k: one
// barrier per step suffices, with no trailing barrier.
//   Sizes per step: all_gather and broadcast move slot_bytes / 2 bytes per
// member; reduce_scatter (slot_bytes / 2) / (4 n) floats of each of the n
// blocks; all_reduce (slot_bytes / 2) / 4 floats. Larger calls are chunked.
//   Reductions: element i = ((x_0 + x_1) + x_2) + ... over members in
// ascending rank order, in float; avg then divides by n (float division).
//
// Waiting: spin briefly, yield, then sleep on the group's futex word in
// periods of at most 100 ms. Each period checks the abort record, and members
// that have not arrived: a departed communicator, and (processes) whether its
// pid is gone, a zombie, or reused (process start time differs). A failure
// publishes the first abort record (rank + message) to every rank and every
// later call on this communicator throws the same CommError at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"

namespace shardscope::engine::comm {

inline constexpr size_t kDefaultSlotBytes = size_t{4} << 20;  // 4 MiB per member per group

struct ShmOptions {
  // POSIX shm name: "/" then up to 250 characters without "/", unique per run,
  // e.g. "/shardscope-<run id>".
  std::string name;
  int rank = 0;
  int world_size = 1;
  std::vector<Group> groups;  // identical on every rank (checked by checksum)
  // Limit of one wait (attaching, or one barrier of one step); a member that has
  // not arrived by then is reported by rank.
  std::chrono::milliseconds timeout{60'000};
  // Staging bytes per member per group: a multiple of 128, >= 8 * largest group
  // size. The segment holds sum over groups of |g| * slot_bytes data bytes.
  size_t slot_bytes = kDefaultSlotBytes;
};

struct ThreadCommOptions {
  std::chrono::milliseconds timeout{60'000};
  size_t slot_bytes = kDefaultSlotBytes;
};

// The group of all ranks: {"world", {0, ..., world_size - 1}}.
Group world_group(int world_size);

// Attaches this process as options.rank (see "Segment life" above). Blocks
// until all world_size ranks attached or the timeout passed (CommError).
std::unique_ptr<Communicator> open_shm_communicator(const ShmOptions& options);

// N communicators for N threads of this process (element r is rank r); they
// share nothing but one anonymous mapping, kept alive by the communicators.
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(
    int world_size, std::vector<Group> groups, const ThreadCommOptions& options = {});

}  // namespace shardscope::engine::comm
