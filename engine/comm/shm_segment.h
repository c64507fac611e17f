// The mapped segment of the shared-memory communicator (layout: shm_layout.h):
// typed accessors over one mapping, creation and attach of a named POSIX shm
// segment by processes (with the rendezvous of all ranks), and an anonymous
// mapping for ranks that are threads of one process.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/shm_communicator.h"
#include "engine/comm/shm_layout.h"

namespace shardscope::engine::comm::shm {

// Owns one mapping (munmap on destruction) of layout.total_bytes bytes.
class Segment {
 public:
  Segment(void* base, Layout layout, std::vector<int> group_sizes, size_t slot_bytes);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base_); }
  RankEntry& rank_entry(int rank) const {
    return reinterpret_cast<RankEntry*>(base_ + layout_.rank_table_offset)[rank];
  }
  GroupControl& group_control(int group) const {
    return *reinterpret_cast<GroupControl*>(base_ + layout_.group_control_offset[group]);
  }
  // Member m (its position in the group's ranks) of group g.
  MemberControl& member(int group, int m) const {
    return reinterpret_cast<MemberControl*>(base_ + layout_.group_control_offset[group] +
                                            sizeof(GroupControl))[m];
  }
  // Member m's slot of group g: slot_bytes bytes, two halves.
  std::byte* slot(int group, int m) const {
    return base_ + layout_.data_offset[group] + static_cast<size_t>(m) * slot_bytes_;
  }
  size_t slot_bytes() const { return slot_bytes_; }
  int num_groups() const { return static_cast<int>(group_sizes_.size()); }
  int group_size(int group) const { return group_sizes_[group]; }

 private:
  std::byte* base_;
  Layout layout_;
  std::vector<int> group_sizes_;
  size_t slot_bytes_;
};

// Throws CommError naming the field unless world_size >= 1, groups is
// non-empty with unique non-empty names and ascending in-range ranks, and
// slot_bytes is a multiple of 128 and >= 8 * the largest group size.
void validate_config(int world_size, const std::vector<Group>& groups, size_t slot_bytes);

// Ranks as threads: a zero-filled anonymous mapping, initialised, every rank
// attached with this process's pid, ready set.
std::shared_ptr<Segment> make_heap_segment(int world_size, const std::vector<Group>& groups,
                                           size_t slot_bytes);

// Ranks as processes: create (rank 0) or attach (others), claim this rank's
// entry, wait until every rank has attached, and (rank 0) unlink the name.
// See "Segment life" in shm_communicator.h.
// Rank 0 first removes stale segments (remove_stale_segments).
std::shared_ptr<Segment> open_process_segment(const ShmOptions& options);

// Unlinks every shardscope segment under shm_dir whose name starts with
// `prefix` and whose creator (rank 0, by pid and start time) is no longer
// alive: a rank 0 killed between creating its segment and the last rank's
// attach leaves the name behind (16 MiB and more each). Segments of another
// user, without a header yet, or not shardscope's are left alone. Returns the
// names removed ("/shardscope-...").
std::vector<std::string> remove_stale_segments(const std::string& prefix = "shardscope-",
                                               const std::string& shm_dir = "/dev/shm");

// The abort record: the first failure of any rank, with a self-describing
// message (truncated to kMaxAbortMessageBytes). Later publications are ignored.
void publish_abort(SegmentHeader& header, int rank, const std::string& message);
// The published record as "<message> (reported by rank R)"; empty when none.
std::string read_abort(const SegmentHeader& header);

}  // namespace shardscope::engine::comm::shm
