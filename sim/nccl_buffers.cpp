#include "sim/nccl_buffers.h"

#include <algorithm>
#include <vector>

namespace shardscope::sim {

NcclBufferEstimate nccl_buffer_estimate(const plan::Schedule& schedule, const HardwareModel& hw) {
  NcclBufferEstimate e;
  if (hw.nccl_channels <= 0) return e;
  // PyTorch's ProcessGroupNCCL creates a communicator at a group's first
  // collective: count the groups this rank's ops use, of more than one rank.
  std::vector<char> used(schedule.groups.size(), 0);
  for (const plan::ScheduleOp& op : schedule.ops)
    if (op.group >= 0 && static_cast<size_t>(op.group) < used.size()) used[op.group] = 1;
  for (size_t g = 0; g < schedule.groups.size(); ++g) {
    const std::vector<int>& ranks = schedule.groups[g].ranks;
    if (used[g] && ranks.size() > 1 &&
        std::find(ranks.begin(), ranks.end(), schedule.rank) != ranks.end())
      ++e.communicators;
  }
  const int64_t per_channel = hw.nccl_buffsize_bytes + kNcclLlBufferBytes + kNcclLl128BufferBytes;
  e.bytes = e.communicators * hw.nccl_channels * per_channel;
  return e;
}

}  // namespace shardscope::sim
