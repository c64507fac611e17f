#include "plan/workload_sizes.h"

namespace shardscope::plan {

WorkloadSizes workload_sizes(const Graph& graph, const Workload& w) {
  WorkloadSizes s;
  s.workload = w;
  s.tensor_numel.reserve(graph.tensors.size());
  for (const Tensor& t : graph.tensors) s.tensor_numel.push_back(t.numel_at(w));
  const size_t n = graph.ops.size();
  s.workspace_bytes.reserve(n);
  s.fwd_flops.reserve(n);
  s.bwd_flops.reserve(n);
  s.fwd_bytes.reserve(n);
  s.bwd_bytes.reserve(n);
  for (const Op& op : graph.ops) {
    s.workspace_bytes.push_back(op.workspace_bytes.eval(w));
    s.fwd_flops.push_back(op.fwd_flops.eval_double(w));
    s.bwd_flops.push_back(op.bwd_flops.eval_double(w));
    s.fwd_bytes.push_back(op.fwd_bytes.eval_double(w));
    s.bwd_bytes.push_back(op.bwd_bytes.eval_double(w));
  }
  return s;
}

}  // namespace shardscope::plan
