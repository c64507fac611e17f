#include "plan/schedule_costs.h"

namespace shardscope::plan {

double schedule_op_flops(const WorkloadSizes& sizes, const ScheduleOp& op) {
  if (op.graph_op < 0) return 0;
  const auto g = static_cast<size_t>(op.graph_op);
  return op.kind == OpKind::backward ? sizes.bwd_flops.at(g) : sizes.fwd_flops.at(g);
}

double schedule_op_bytes(const WorkloadSizes& sizes, const ScheduleOp& op) {
  if (op.graph_op < 0) return static_cast<double>(op.bytes);
  const auto g = static_cast<size_t>(op.graph_op);
  // Graph bytes are fp32 bytes; the op runs in its dtype.
  const double scale = dtype_bytes(op.dtype) / 4.0;
  return scale * (op.kind == OpKind::backward ? sizes.bwd_bytes.at(g) : sizes.fwd_bytes.at(g));
}

}  // namespace shardscope::plan
