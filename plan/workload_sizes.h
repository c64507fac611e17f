// A graph's symbolic sizes (polynomials in B and T) evaluated at one
// workload: what planning and costing read once per tensor and op. Every
// schedule and cost model of that workload can share one (sweeps build
// thousands; evaluating the polynomials per schedule was a tenth of the time).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "plan/expr.h"
#include "plan/graph.h"

namespace shardscope::plan {

struct WorkloadSizes {
  Workload workload;
  std::vector<int64_t> tensor_numel;     ///< per graph tensor: elements
  std::vector<int64_t> workspace_bytes;  ///< per graph op: fp32 scratch bytes
  /// Per graph op: elements of its forward / backward temporaries by Precision.
  using TempNumel = std::array<int64_t, kPrecisionCount>;
  std::vector<TempNumel> fwd_temp_numel, bwd_temp_numel;
  /// Per graph op, forward and backward: FLOPs and fp32 bytes moved.
  std::vector<double> fwd_flops, bwd_flops, fwd_bytes, bwd_bytes;
  bool matches(const Graph& g, const Workload& w) const {
    return workload.same_as(w) && tensor_numel.size() == g.tensors.size() &&
           workspace_bytes.size() == g.ops.size();
  }
};

/// Bytes of temporaries counted in `numel` at compute dtype `compute_bytes`.
int64_t temp_bytes(const WorkloadSizes::TempNumel& numel, int compute_bytes);

/// Throws std::overflow_error like Tensor::numel_at when a count overflows.
WorkloadSizes workload_sizes(const Graph& graph, const Workload& workload);

}  // namespace shardscope::plan
