// The shared-memory segment of the CPU communicator: one mapping shared by all
// ranks (a POSIX shm object between processes, an anonymous MAP_SHARED mapping
// between threads). Every offset and size below is in bytes; every structure is
// a multiple of kCacheLine and starts on a cache line.
//
//   offset 0                   SegmentHeader          (identity, abort record)
//   rank_table_offset          RankEntry[world_size]  (pid, process start time, state)
//   group_control_offset[g]    GroupControl           (futex word, waiter count)
//                              MemberControl[|g|]     (arrival epoch, step descriptors)
//   data_offset[g] (4 KiB aligned)
//                              slot[|g|] of slot_bytes each, member order; a slot is two
//                              halves of slot_bytes / 2 used by alternate steps
//
// Only std::atomic fields are read or written concurrently; the plain fields of
// SegmentHeader are written by the creator before `ready` is released and never
// change afterwards; a StepDescriptor and slot half are written by their owner
// before it releases its arrival epoch and read by peers after they acquire it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/comm/communicator.h"

namespace shardscope::engine::comm::shm {

inline constexpr uint64_t kMagic = 0x4d4d4f43'53535348ull;  // "HSSSCOMM" little-endian
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kDataAlignment = 4096;
inline constexpr size_t kMaxAbortMessageBytes = 1024;

static_assert(std::atomic<uint32_t>::is_always_lock_free, "process-shared atomics need lock-free");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "process-shared atomics need lock-free");
static_assert(std::atomic<int32_t>::is_always_lock_free, "process-shared atomics need lock-free");
static_assert(sizeof(std::atomic<uint32_t>) == 4, "the futex word must be 32 bits");

// Collective kinds as stored in StepDescriptor::op and MemberControl::current_op.
enum class OpKind : uint32_t {
  none = 0,
  all_gather,
  reduce_scatter,
  all_reduce,
  broadcast,
  barrier
};
const char* op_name(OpKind op);

// RankEntry::state values.
enum RankState : uint32_t {
  kRankAbsent = 0,    // not attached yet
  kRankClaiming = 1,  // attaching: pid being written
  kRankAttached = 2,  // pid and start time valid
  kRankDeparted = 3,  // its communicator was destroyed (clean exit or unwinding)
};

// SegmentHeader::abort_state values.
enum AbortState : uint32_t { kNoAbort = 0, kAbortWriting = 1, kAbortPublished = 2 };

struct alignas(kCacheLine) SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes;  // sizeof(SegmentHeader) of the creator
  uint32_t world_size;
  uint32_t num_groups;
  uint64_t slot_bytes;            // staging bytes per member per group (both halves)
  uint64_t total_bytes;           // size of the whole segment
  uint64_t group_table_checksum;  // group_table_checksum() of the creator's groups
  int32_t creator_pid;
  uint32_t reserved;
  uint64_t creator_start_time;  // /proc/<pid>/stat starttime (clock ticks since boot); 0 unknown
  std::atomic<uint32_t> ready;  // 0 while the creator initialises, 1 once every field is set
  std::atomic<uint32_t> abort_state;  // AbortState: first failure wins, the others keep it
  std::atomic<int32_t> abort_rank;    // rank that published the abort record
  uint32_t abort_message_bytes;       // <= kMaxAbortMessageBytes
  char abort_message[kMaxAbortMessageBytes];
};

struct alignas(kCacheLine) RankEntry {
  std::atomic<uint32_t> state;  // RankState
  std::atomic<int32_t> pid;
  std::atomic<uint64_t> start_time;  // as SegmentHeader::creator_start_time
};

// One per group. Waiters sleep on `wake_seq` (a futex word) after announcing
// themselves in `waiters`; an arriving member bumps wake_seq and wakes them when
// waiters > 0 (seq_cst on both sides, so no wake-up is lost).
struct alignas(kCacheLine) GroupControl {
  std::atomic<uint32_t> wake_seq;
  std::atomic<uint32_t> waiters;
};

// What a member is doing in one step: members compare these after the step's
// first barrier, so mismatched calls fail loudly instead of corrupting data.
struct StepDescriptor {
  uint32_t op;     // OpKind
  int32_t root;    // broadcast root (global rank), -1 otherwise
  uint64_t seq;    // per-group collective sequence number, from 1
  uint64_t bytes;  // the call's size argument in bytes (per-rank bytes, count * 4, ...)
};

// One per member of each group. `arrived` is the number of barrier epochs the
// member has reached (monotonic); a barrier at epoch e completes when every
// member's `arrived` >= e. step[p] describes the member's latest step of parity p.
struct alignas(kCacheLine) MemberControl {
  std::atomic<uint64_t> arrived;
  std::atomic<uint64_t> current_seq;  // for timeout messages only (relaxed)
  std::atomic<uint32_t> current_op;   // OpKind, for timeout messages only (relaxed)
  StepDescriptor step[2];
};

static_assert(sizeof(SegmentHeader) % kCacheLine == 0);
static_assert(sizeof(RankEntry) == kCacheLine);
static_assert(sizeof(GroupControl) == kCacheLine);
static_assert(sizeof(MemberControl) % kCacheLine == 0);

// Offsets (bytes from the segment start) of everything, computed identically by
// every rank from (world_size, groups, slot_bytes).
struct Layout {
  size_t rank_table_offset = 0;
  std::vector<size_t> group_control_offset;  // per group; its MemberControls follow
  std::vector<size_t> data_offset;           // per group; |g| slots of slot_bytes
  size_t total_bytes = 0;
};
Layout compute_layout(int world_size, const std::vector<Group>& groups, size_t slot_bytes);

// FNV-1a 64 over world size, slot bytes, and each group's name and ranks.
uint64_t group_table_checksum(int world_size, const std::vector<Group>& groups, size_t slot_bytes);

}  // namespace shardscope::engine::comm::shm
