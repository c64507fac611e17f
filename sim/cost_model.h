// Cost model: the duration of one schedule op on a HardwareModel, without
// contention (the simulator applies contention_factor when it starts an op).
// Formulas (docs/simulator.md):
//   graph ops (forward, recompute: fwd Polys; backward: bwd Polys), at the op's dtype:
//     t = max(FLOPs / (peak[dtype] * eff[op type]), bytes * dtype_bytes/4 / HBM bw)
//   other device ops (casts, copy-out, grad cast/accumulate/norm/scale, optimizer):
//     t = bytes / HBM bw;   on the host stream: bytes / host memory bw
//   h2d, d2h: bytes / PCIe bw
//   collectives over n ranks, S = op.bytes (the full buffer):
//     all-gather, reduce-scatter: latency + (S / B) (n-1)/n
//     all-reduce:                 latency + 2 (S / B) (n-1)/n
//     n = 1: 0. B, latency: NVLink when every rank of the group is on one
//     node (rank / gpus_per_node equal), else IB (flat ring whose slowest
//     link is each GPU's own NIC).
#pragma once

#include <vector>

#include "plan/graph.h"
#include "plan/schedule.h"
#include "sim/hardware.h"
#include "sim/time.h"

namespace shardscope::sim {

struct LinkModel {
  double bus_bytes_per_s = 0;
  TimeNs latency;
  bool inter_node = false;
};

class CostModel {
 public:
  /// References must outlive the model.
  CostModel(const HardwareModel& hw, const plan::Graph& graph, const plan::Schedule& schedule);

  /// Uncontended duration of schedule op `op`.
  TimeNs duration(int op) const;
  /// The link the collectives of `group` use.
  LinkModel link(int group) const;

  /// FLOPs and bytes of a graph op as the cost model prices them (0 for other ops).
  double flops(int op) const;
  double bytes(int op) const;

 private:
  TimeNs collective_duration(const plan::ScheduleOp& op) const;

  const HardwareModel& hw_;
  const plan::Graph& graph_;
  const plan::Schedule& schedule_;
};

/// Closed-form ring time of one collective: latency + factor (S/B)(n-1)/n,
/// factor 2 for all-reduce and 1 otherwise.
TimeNs collective_time(plan::OpKind kind, double bytes, int64_t n, const LinkModel& link);

}  // namespace shardscope::sim
