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
    for (auto [temps, out] : {std::pair{&op.fwd_temps, &s.fwd_temp_numel},
                              std::pair{&op.bwd_temps, &s.bwd_temp_numel}}) {
      WorkloadSizes::TempNumel numel{};
      for (const Temp& t : *temps) numel[static_cast<size_t>(t.precision)] += t.numel.eval(w);
      out->push_back(numel);
    }
  }
  return s;
}

int64_t temp_bytes(const WorkloadSizes::TempNumel& numel, int compute_bytes) {
  int64_t bytes = 0;
  for (size_t p = 0; p < numel.size(); ++p)
    bytes += numel[p] * precision_bytes(static_cast<Precision>(p), compute_bytes);
  return bytes;
}

}  // namespace shardscope::plan
