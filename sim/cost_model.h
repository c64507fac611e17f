// Cost model: the duration of one schedule op on a HardwareModel, without
// contention (the simulator applies contention_factor when it starts an op).
// Formulas (docs/simulator.md):
//   graph ops (forward, recompute: fwd Polys; backward: bwd Polys), at the op's dtype:
//     t = max(FLOPs / (peak[dtype] * clock * eff[op type]),
//             bytes * dtype_bytes/4 / (HBM bw * mem_eff[op type]))
//     clock, mem_eff: hw.op_level (1 by default); linear ops with
//     hw.op_level.gemm: an unaligned 16-bit GEMM at a fixed fraction of peak,
//     else eff times the wave-quantization term of its output shape
//     (backward: input- and weight-gradient GEMMs apart); attention ops by the
//     SDPA kernel the schedule records: a fused kernel at its (kernel, head_dim,
//     direction) fraction of peak, the math kernel as its GEMMs + T x T passes
//     (OpLevelModel::math_attention); docs/simulator.md
//   other device ops (casts, copy-out, grad cast/accumulate/norm/scale, optimizer):
//     t = bytes / HBM bw;   on the host stream: bytes / host memory bw
//   h2d, d2h: bytes / PCIe bw
//   collectives over a group of n ranks on k nodes (m = fewest of its ranks
//   on one node), S = op.bytes (the full buffer), f = 2 for all-reduce else 1:
//     n = 1: 0
//     a CollectiveFit for (kind, n, k > 1): latency + f (S / busbw) (n-1)/n, its
//       small line's latency and busbw for S <= small_max_bytes
//     ring:  C + f (n-1) hop + f (S / B) (n-1)/n
//     tree (all-reduce across nodes only; M = most of its ranks on one node):
//            C + 2 ((M-1) hop_nvlink + ceil(log2 k) hop_ib) + 2 (S / B) (n-1)/n
//     C = collective_latency_ns; hop = NVLink hop latency when k = 1, else IB's;
//     B = NVLink bus bandwidth when k = 1, else min(NVLink, m x IB per GPU):
//     NCCL runs one ring per NIC, so a node's m GPUs drive m NICs at once.
//     all_reduce_algorithm auto takes the faster of ring and tree.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/graph.h"
#include "plan/schedule.h"
#include "plan/workload_sizes.h"
#include "sim/hardware.h"
#include "sim/time.h"

namespace shardscope::sim {

/// Where a process group's ranks sit on the cluster.
struct GroupSpan {
  int64_t ranks = 0;
  int64_t nodes = 0;         ///< distinct nodes (rank / gpus_per_node)
  int64_t min_per_node = 0;  ///< fewest of the group's ranks on one of its nodes
  int64_t max_per_node = 0;
  bool operator==(const GroupSpan& o) const {
    return ranks == o.ranks && nodes == o.nodes && min_per_node == o.min_per_node &&
           max_per_node == o.max_per_node;
  }
  bool operator!=(const GroupSpan& o) const { return !(*this == o); }
};

/// `ranks` ascending or not; gpus_per_node >= 1.
GroupSpan group_span(const std::vector<int>& ranks, int64_t gpus_per_node);

/// Closed-form time of one collective (the file comment's formulas).
TimeNs collective_time(const HardwareModel& hw, plan::OpKind kind, double bytes,
                       const GroupSpan& span);

class CostModel {
 public:
  /// References must outlive the model. `spans`: one per schedule group, as
  /// seen by the simulated rank; empty = computed from schedule.groups.
  /// `sizes`: the graph's sizes at the schedule's workload, shared (sweeps);
  /// null or another workload's = evaluated here.
  CostModel(const HardwareModel& hw, const plan::Graph& graph, const plan::Schedule& schedule,
            std::vector<GroupSpan> spans = {}, const plan::WorkloadSizes* sizes = nullptr);

  /// Uncontended duration of schedule op `op`.
  TimeNs duration(int op) const;
  const GroupSpan& span(int group) const { return spans_.at(static_cast<size_t>(group)); }

  /// FLOPs and bytes of a graph op as the cost model prices them (0 for other
  /// ops; bytes include upcast_bytes when hw.op_level.upcast_bytes).
  double flops(int op) const;
  double bytes(int op) const;

 private:
  /// Bytes a graph op moves beyond the graph's (hw.op_level.upcast_bytes):
  /// its fp32 tensors' extra bytes over the compute dtype and its
  /// non-compute-dtype temporaries written and read once.
  double upcast_bytes(const plan::ScheduleOp& op) const;
  /// Compute seconds of a linear op under hw.op_level.gemm (unaligned
  /// dimensions, wave quantization); `curve_s` when neither applies.
  double linear_compute_s(const plan::Op& g, double op_flops, double peak, const std::string& key,
                          plan::DType dtype, bool backward, double curve_s) const;

  /// Seconds of an attention op under hw.op_level's per-kernel terms: the
  /// fused kernel's fraction at its head_dim (`*compute_s`), or the math
  /// kernel's GEMMs plus T x T passes (`*total_s`, no roofline max: they are
  /// separate kernels). False when neither applies (no kernel recorded, no
  /// entry for it): the efficiency curve prices the op.
  bool attention_s(const plan::Op& g, const plan::ScheduleOp& op, double op_flops, double peak,
                   double* compute_s, double* total_s) const;

  const HardwareModel& hw_;
  const plan::Graph& graph_;
  const plan::Schedule& schedule_;
  std::vector<GroupSpan> spans_;
  plan::WorkloadSizes own_sizes_;
  const plan::WorkloadSizes* sizes_;
  // Graph-op durations by (graph op, backward?) at a dtype, ns = -1 until
  // computed: forward and recompute of one op cost the same.
  struct Cached {
    int64_t ns = -1;
    plan::DType dtype = plan::DType::f32;
  };
  mutable std::vector<Cached> graph_op_ns_;
};

}  // namespace shardscope::sim
