#include "sim/cost_model.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <string>

#include "plan/schedule_costs.h"

namespace shardscope::sim {

GroupSpan group_span(const std::vector<int>& ranks, int64_t gpus_per_node) {
  GroupSpan s;
  s.ranks = static_cast<int64_t>(ranks.size());
  if (ranks.empty()) return s;
  // Ranks of one group are ascending in plan's schedules; count runs per node
  // without assuming it.
  std::vector<int64_t> nodes;
  nodes.reserve(ranks.size());
  for (int r : ranks) nodes.push_back(r / gpus_per_node);
  std::sort(nodes.begin(), nodes.end());
  s.min_per_node = INT64_MAX;
  for (size_t i = 0; i < nodes.size();) {
    size_t j = i;
    while (j < nodes.size() && nodes[j] == nodes[i]) ++j;
    const auto count = static_cast<int64_t>(j - i);
    ++s.nodes;
    s.min_per_node = std::min(s.min_per_node, count);
    s.max_per_node = std::max(s.max_per_node, count);
    i = j;
  }
  return s;
}

namespace {

int64_t ceil_log2(int64_t k) {
  int64_t d = 0;
  while ((int64_t{1} << d) < k) ++d;
  return d;
}

}  // namespace

namespace {
// No op of a real step takes 1e6 s (11.6 days): a duration beyond it comes
// from a hardware figure off by orders of magnitude (a bandwidth of 1e-300)
// and would overflow the step's int64 ns clock. The error names the keys.
constexpr double kMaxOpSeconds = 1e6;
TimeNs bounded(double seconds, const HardwareModel& hw, const std::string& what,
               const std::string& keys) {
  if (!(seconds <= kMaxOpSeconds)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", seconds);
    throw Error("hardware '" + hw.name + "': " + what + " would take " + buf +
                " s (more than 1e6 s): check " + keys);
  }
  return TimeNs::from_seconds(seconds);
}
}  // namespace

TimeNs collective_time(const HardwareModel& hw, plan::OpKind kind, double bytes,
                       const GroupSpan& span) {
  const int64_t n = span.ranks;
  if (n <= 1) return TimeNs(0);
  const double f = kind == plan::OpKind::all_reduce ? 2.0 : 1.0;
  const double share = static_cast<double>(n - 1) / static_cast<double>(n);
  const bool multi_node = span.nodes > 1;
  if (const CollectiveFit* fit = hw.collective_fit(kind, n, multi_node)) {
    const std::string what = std::string("collective ") + plan::op_kind_name(kind) + " over " +
                             std::to_string(n) + " ranks";
    if (fit->small_max_bytes > 0 && bytes <= static_cast<double>(fit->small_max_bytes))
      return TimeNs(fit->small_latency_ns) + bounded(f * bytes / fit->small_bus_bytes_per_s * share,
                                                     hw, what,
                                                     "collectives[].small.bus_bytes_per_s");
    return TimeNs(fit->latency_ns) + bounded(f * bytes / fit->bus_bytes_per_s * share, hw, what,
                                             "collectives[].bus_bytes_per_s");
  }
  const double bus = multi_node
                         ? std::min(hw.nvlink_bus_bytes_per_s,
                                    static_cast<double>(span.min_per_node) * hw.ib_bytes_per_s)
                         : hw.nvlink_bus_bytes_per_s;
  const TimeNs transfer =
      bounded(f * bytes / bus * share, hw,
              std::string("collective ") + plan::op_kind_name(kind) + " over " + std::to_string(n) +
                  " ranks",
              multi_node ? "nvlink_bus_bytes_per_s and ib_bytes_per_s" : "nvlink_bus_bytes_per_s");
  // Latency terms in double seconds, bounded like the transfer: n - 1 hops of
  // up to kMaxLatencyNs each over 2^20 ranks would overflow int64 ns.
  const std::string what = std::string("collective ") + plan::op_kind_name(kind) + " over " +
                           std::to_string(n) + " ranks";
  const double hop = static_cast<double>(multi_node ? hw.ib_latency_ns : hw.nvlink_latency_ns);
  const TimeNs ring = bounded((static_cast<double>(hw.collective_latency_ns) +
                               f * static_cast<double>(n - 1) * hop) *
                                  1e-9,
                              hw, what + " (latency)",
                              multi_node ? "collective_latency_ns and ib_latency_ns"
                                         : "collective_latency_ns and nvlink_latency_ns") +
                      transfer;
  if (kind != plan::OpKind::all_reduce || !multi_node ||
      hw.all_reduce_algorithm == CollectiveAlgorithm::ring)
    return ring;
  const double tree_ns =
      static_cast<double>(hw.collective_latency_ns) +
      2.0 *
          (static_cast<double>(span.max_per_node - 1) * static_cast<double>(hw.nvlink_latency_ns) +
           static_cast<double>(ceil_log2(span.nodes)) * static_cast<double>(hw.ib_latency_ns));
  const TimeNs tree = bounded(tree_ns * 1e-9, hw, what + " (latency)",
                              "collective_latency_ns, nvlink_latency_ns and ib_latency_ns") +
                      transfer;
  if (hw.all_reduce_algorithm == CollectiveAlgorithm::tree) return tree;
  return tree < ring ? tree : ring;
}

CostModel::CostModel(const HardwareModel& hw, const plan::Graph& graph,
                     const plan::Schedule& schedule, std::vector<GroupSpan> spans,
                     const plan::WorkloadSizes* sizes)
    : hw_(hw), graph_(graph), schedule_(schedule), spans_(std::move(spans)), sizes_(sizes) {
  if (!sizes_ || !sizes_->matches(graph, schedule.workload)) {
    own_sizes_ = plan::workload_sizes(graph, schedule.workload);
    sizes_ = &own_sizes_;
  }
  if (spans_.empty())
    for (const plan::ProcessGroup& g : schedule.groups)
      spans_.push_back(group_span(g.ranks, hw.gpus_per_node));
  if (spans_.size() != schedule.groups.size())
    throw Error("cost model: " + std::to_string(spans_.size()) + " group spans for " +
                std::to_string(schedule.groups.size()) + " groups");
}

double CostModel::flops(int index) const {
  return plan::schedule_op_flops(*sizes_, schedule_.ops.at(static_cast<size_t>(index)));
}

double CostModel::bytes(int index) const {
  const plan::ScheduleOp& op = schedule_.ops.at(static_cast<size_t>(index));
  const double graph_bytes = plan::schedule_op_bytes(*sizes_, op);
  if (op.graph_op < 0 || !hw_.op_level.upcast_bytes) return graph_bytes;
  return graph_bytes + upcast_bytes(op);
}

double CostModel::upcast_bytes(const plan::ScheduleOp& op) const {
  const int compute_bytes = plan::dtype_bytes(op.dtype);
  if (compute_bytes >= 4) return 0;  // fp32 compute: nothing is upcast
  const auto g = static_cast<size_t>(op.graph_op);
  const plan::Op& graph_op = graph_.ops.at(g);
  const bool backward = op.kind == plan::OpKind::backward;
  // Graph bytes count every floating tensor at the compute dtype. fp32
  // tensors (statistics, log-probabilities) are written (forward) and read
  // back (backward, saved) at 4 bytes: the difference.
  double extra = 0;
  for (int t : backward ? graph_op.saved : graph_op.outputs) {
    const plan::Tensor& tensor = graph_.tensors.at(static_cast<size_t>(t));
    if (plan::is_floating(tensor.dtype) && tensor.precision == plan::Precision::fp32)
      extra += static_cast<double>(4 - compute_bytes) *
               static_cast<double>(sizes_->tensor_numel.at(static_cast<size_t>(t)));
  }
  // Temporaries that are not in the compute dtype are the implementation's
  // upcasts (Hugging Face's logits.float(), fp32 softmax gradients): each is
  // written once and read once.
  plan::WorkloadSizes::TempNumel temps =
      backward ? sizes_->bwd_temp_numel.at(g) : sizes_->fwd_temp_numel.at(g);
  temps[static_cast<size_t>(plan::Precision::compute)] = 0;
  return extra + 2.0 * static_cast<double>(plan::temp_bytes(temps, compute_bytes));
}

double CostModel::linear_compute_s(const plan::Op& g, double op_flops, double peak,
                                   const std::string& key, plan::DType dtype, bool backward,
                                   double curve_s) const {
  const GemmShapeModel& gemm = hw_.op_level.gemm;
  const int64_t in = *g.attrs.in_features, out = *g.attrs.out_features;
  // An unaligned 16-bit GEMM runs cuBLAS's align1 kernels at a fixed fraction
  // of peak, whatever its size: the curve (square, aligned GEMMs) does not apply.
  if (const double e = gemm_unaligned_efficiency(gemm, dtype, in, out, backward); e > 0)
    return op_flops / (peak * e);
  if (gemm.sm_count <= 0 || g.inputs.empty()) return curve_s;
  // Rows M = input elements / in_features. Forward: [M, in] x [in, out]
  // (output M x out); backward: the input gradient (output M x in) and the
  // weight gradient (output out x in), each half of the backward FLOPs. The
  // curve was measured on square GEMMs, so the shape term is relative: the
  // wave efficiency of this output over that of the square GEMM of the same
  // FLOPs (side s = (FLOPs / 2)^(1/3)).
  const double m = static_cast<double>(sizes_->tensor_numel.at(static_cast<size_t>(g.inputs[0]))) /
                   static_cast<double>(in);
  const auto relative = [&](double rows, double cols, double flops) {
    const double side = std::cbrt(flops / 2);
    return gemm_wave_efficiency(gemm, rows, cols) / gemm_wave_efficiency(gemm, side, side);
  };
  const auto at = [&](double flops, double rows, double cols) {
    return flops / (peak * hw_.efficiency_of(key, dtype, flops) * relative(rows, cols, flops));
  };
  if (!backward) return at(op_flops, m, static_cast<double>(out));
  return at(op_flops / 2, m, static_cast<double>(in)) +
         at(op_flops / 2, static_cast<double>(out), static_cast<double>(in));
}

bool CostModel::attention_s(const plan::Op& g, const plan::ScheduleOp& op, double op_flops,
                            double peak, double* compute_s, double* total_s) const {
  const OpLevelModel& level = hw_.op_level;
  const auto o = static_cast<size_t>(op.graph_op);
  if (o >= schedule_.attention_kernels.size() || !g.attrs.head_dim) return false;
  const plan::SdpaKernel kernel = schedule_.attention_kernels[o];
  const bool backward = op.kind == plan::OpKind::backward;
  if (kernel == plan::SdpaKernel::math) {
    if (!level.math_attention) return false;
    // Shapes at SDPA: q [B, H, T, D] (k, v repeated to H heads), scores and
    // probabilities [B, H, T, T] in fp32 whatever the compute dtype.
    const double heads_t2 = static_cast<double>(sizes_->workload.batch) *
                            static_cast<double>(g.attrs.n_head.value_or(1)) *
                            static_cast<double>(sizes_->workload.seq) *
                            static_cast<double>(sizes_->workload.seq);
    const double bmm_flops = 2 * heads_t2 * static_cast<double>(*g.attrs.head_dim);
    const double fp32_peak = hw_.peak_flops(plan::DType::f32) * level.sustained_clock_fraction;
    const double bmms = backward ? 4 : 2;
    const double passes = backward ? 7 : 6;
    const double gemm_s =
        bmms * bmm_flops / (fp32_peak * hw_.efficiency_of("linear", plan::DType::f32, bmm_flops));
    const double pass_s =
        passes * heads_t2 * 4 /
        (hw_.hbm_bytes_per_s *
         level.memory_efficiency_of(backward ? "attention.backward" : "attention"));
    *total_s = gemm_s + pass_s;
    return true;
  }
  const double e = level.attention_efficiency_of(kernel, *g.attrs.head_dim, backward);
  if (e <= 0) return false;
  *compute_s = op_flops / (peak * e);
  return true;
}

TimeNs CostModel::duration(int index) const {
  const plan::ScheduleOp& op = schedule_.ops.at(static_cast<size_t>(index));
  if (plan::is_collective(op.kind))
    return collective_time(hw_, op.kind, static_cast<double>(op.bytes), span(op.group));
  const auto what = [&] { return std::string("op ") + plan::op_kind_name(op.kind); };
  if (op.kind == plan::OpKind::h2d || op.kind == plan::OpKind::d2h)
    return bounded(static_cast<double>(op.bytes) / hw_.pcie_bytes_per_s, hw_, what(),
                   "pcie_bytes_per_s");
  const bool on_host =
      schedule_.stream_roles.at(static_cast<size_t>(op.stream)) == plan::StreamRole::host;
  if (op.graph_op < 0) {
    if (on_host)
      return bounded(static_cast<double>(op.bytes) / hw_.host_memory_bytes_per_s, hw_, what(),
                     "host_memory_bytes_per_s");
    const auto fit = hw_.memory_ops.find(plan::op_kind_name(op.kind));
    if (fit == hw_.memory_ops.end())
      return bounded(static_cast<double>(op.bytes) / hw_.hbm_bytes_per_s, hw_, what(),
                     "hbm_bytes_per_s");
    return TimeNs(fit->second.fixed_ns) +
           bounded(static_cast<double>(op.bytes) /
                       (hw_.hbm_bytes_per_s * fit->second.bandwidth_efficiency),
                   hw_, what(),
                   "hbm_bytes_per_s and memory_ops." + std::string(plan::op_kind_name(op.kind)) +
                       ".bandwidth_efficiency");
  }
  const size_t slot = 2 * static_cast<size_t>(op.graph_op) + (op.kind == plan::OpKind::backward);
  if (graph_op_ns_.empty()) graph_op_ns_.assign(2 * graph_.ops.size(), Cached{});
  Cached& cached = graph_op_ns_.at(slot);
  if (cached.ns >= 0 && cached.dtype == op.dtype) return TimeNs(cached.ns);
  const plan::Op& g = graph_.ops.at(static_cast<size_t>(op.graph_op));
  const double op_flops = flops(index);
  const bool backward = op.kind == plan::OpKind::backward;
  const std::string key = efficiency_key(cost_op_type(g), backward);
  const OpLevelModel& level = hw_.op_level;
  const double peak = hw_.peak_flops(op.dtype) * level.sustained_clock_fraction;
  double compute_s = op_flops / (peak * hw_.efficiency_of(key, op.dtype, op_flops));
  if (g.type == plan::OpType::linear && g.attrs.in_features && g.attrs.out_features)
    compute_s = linear_compute_s(g, op_flops, peak, key, op.dtype, backward, compute_s);
  double total_s = -1;  // >= 0: the op's time without the roofline's max (math SDPA)
  if (g.type == plan::OpType::attention) attention_s(g, op, op_flops, peak, &compute_s, &total_s);
  const double memory_s = bytes(index) / (hw_.hbm_bytes_per_s * level.memory_efficiency_of(key));
  const double seconds = total_s >= 0 ? total_s : (compute_s > memory_s ? compute_s : memory_s);
  cached.ns = bounded(seconds, hw_, "op '" + g.name + "'",
                      std::string("peak_flops_") +
                          (op.dtype == plan::DType::bf16  ? "bf16"
                           : op.dtype == plan::DType::f16 ? "fp16"
                                                          : "fp32") +
                          " and the efficiency of '" + key + "', or hbm_bytes_per_s")
                  .ns;
  cached.dtype = op.dtype;
  return TimeNs(cached.ns);
}

}  // namespace shardscope::sim
