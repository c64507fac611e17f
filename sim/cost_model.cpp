#include "sim/cost_model.h"

namespace shardscope::sim {

CostModel::CostModel(const HardwareModel& hw, const plan::Graph& graph,
                     const plan::Schedule& schedule)
    : hw_(hw), graph_(graph), schedule_(schedule) {}

LinkModel CostModel::link(int group) const {
  const plan::ProcessGroup& g = schedule_.groups.at(static_cast<size_t>(group));
  bool one_node = true;
  for (int r : g.ranks)
    if (r / hw_.gpus_per_node != g.ranks.front() / hw_.gpus_per_node) one_node = false;
  LinkModel l;
  l.inter_node = !one_node;
  l.bus_bytes_per_s = one_node ? hw_.nvlink_bus_bytes_per_s : hw_.ib_bytes_per_s;
  l.latency = TimeNs(one_node ? hw_.nvlink_latency_ns : hw_.ib_latency_ns);
  return l;
}

TimeNs collective_time(plan::OpKind kind, double bytes, int64_t n, const LinkModel& link) {
  if (n <= 1) return TimeNs(0);
  const double factor = kind == plan::OpKind::all_reduce ? 2.0 : 1.0;
  const double seconds =
      factor * (bytes / link.bus_bytes_per_s) * static_cast<double>(n - 1) / static_cast<double>(n);
  return link.latency + TimeNs::from_seconds(seconds);
}

TimeNs CostModel::collective_duration(const plan::ScheduleOp& op) const {
  const auto n =
      static_cast<int64_t>(schedule_.groups.at(static_cast<size_t>(op.group)).ranks.size());
  return collective_time(op.kind, static_cast<double>(op.bytes), n, link(op.group));
}

double CostModel::flops(int index) const {
  const plan::ScheduleOp& op = schedule_.ops.at(static_cast<size_t>(index));
  if (op.graph_op < 0) return 0;
  const plan::Op& g = graph_.ops.at(static_cast<size_t>(op.graph_op));
  return op.kind == plan::OpKind::backward ? g.bwd_flops.eval_double(schedule_.workload)
                                           : g.fwd_flops.eval_double(schedule_.workload);
}

double CostModel::bytes(int index) const {
  const plan::ScheduleOp& op = schedule_.ops.at(static_cast<size_t>(index));
  if (op.graph_op < 0) return static_cast<double>(op.bytes);
  const plan::Op& g = graph_.ops.at(static_cast<size_t>(op.graph_op));
  // Graph bytes are fp32 bytes; the op runs in its dtype.
  const double scale = plan::dtype_bytes(op.dtype) / 4.0;
  return scale * (op.kind == plan::OpKind::backward ? g.bwd_bytes.eval_double(schedule_.workload)
                                                    : g.fwd_bytes.eval_double(schedule_.workload));
}

TimeNs CostModel::duration(int index) const {
  const plan::ScheduleOp& op = schedule_.ops.at(static_cast<size_t>(index));
  if (plan::is_collective(op.kind)) return collective_duration(op);
  if (op.kind == plan::OpKind::h2d || op.kind == plan::OpKind::d2h)
    return TimeNs::from_seconds(static_cast<double>(op.bytes) / hw_.pcie_bytes_per_s);
  const bool on_host =
      schedule_.stream_roles.at(static_cast<size_t>(op.stream)) == plan::StreamRole::host;
  if (op.graph_op < 0) {
    const double bw = on_host ? hw_.host_memory_bytes_per_s : hw_.hbm_bytes_per_s;
    return TimeNs::from_seconds(static_cast<double>(op.bytes) / bw);
  }
  const plan::Op& g = graph_.ops.at(static_cast<size_t>(op.graph_op));
  const double compute_s = flops(index) / (hw_.peak_flops(op.dtype) * hw_.efficiency_of(g.type));
  const double memory_s = bytes(index) / hw_.hbm_bytes_per_s;
  return TimeNs::from_seconds(compute_s > memory_s ? compute_s : memory_s);
}

}  // namespace shardscope::sim
