#include "engine/run/emulated_timing.h"

#include "plan/schedule.h"
#include "sim/cost_model.h"

namespace shardscope::engine::run {

int64_t emulated_collective_ns(const sim::HardwareModel& hw, EmulatedCollective kind,
                               uint64_t bytes, const std::vector<int>& group_ranks) {
  const sim::GroupSpan span = sim::group_span(group_ranks, hw.gpus_per_node);
  const auto n = static_cast<double>(span.ranks);
  if (span.ranks <= 1) return 0;
  const auto b = static_cast<double>(bytes);
  switch (kind) {
    case EmulatedCollective::all_gather:
      return sim::collective_time(hw, plan::OpKind::all_gather, b * n, span).ns;
    case EmulatedCollective::reduce_scatter:
      return sim::collective_time(hw, plan::OpKind::reduce_scatter, b, span).ns;
    case EmulatedCollective::all_reduce:
      return sim::collective_time(hw, plan::OpKind::all_reduce, b, span).ns;
    case EmulatedCollective::broadcast:
      // The all-gather formula moves S (n-1)/n per rank; a pipelined ring
      // broadcast moves all of S through every link: scale S by n/(n-1).
      return sim::collective_time(hw, plan::OpKind::all_gather, b * n / (n - 1), span).ns;
  }
  return 0;
}

}  // namespace shardscope::engine::run
