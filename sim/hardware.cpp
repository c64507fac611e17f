// Hardware model lookups (efficiencies by op type, dtype and FLOPs; fitted
// collectives; peak FLOP/s) and validate(). Presets are
// sim/hardware_presets.cpp, JSON sim/hardware_json.cpp.
#include "sim/hardware.h"

#include <cmath>
#include <cstdint>

namespace shardscope::sim {

const char* collective_algorithm_name(CollectiveAlgorithm a) {
  switch (a) {
    case CollectiveAlgorithm::ring:
      return "ring";
    case CollectiveAlgorithm::tree:
      return "tree";
    case CollectiveAlgorithm::automatic:
      return "auto";
  }
  return "?";
}

const CollectiveFit* HardwareModel::collective_fit(plan::OpKind kind, int64_t ranks,
                                                   bool multi_node) const {
  for (const CollectiveFit& f : collectives)
    if (f.kind == kind && f.ranks == ranks && f.multi_node == multi_node) return &f;
  return nullptr;
}

double HardwareModel::peak_flops(plan::DType dtype) const {
  switch (dtype) {
    case plan::DType::f32:
      return peak_flops_fp32;
    case plan::DType::bf16:
      return peak_flops_bf16;
    case plan::DType::f16:
      return peak_flops_fp16;
    default:
      break;
  }
  throw Error(std::string("hardware: no compute peak for dtype ") + plan::dtype_name(dtype));
}

bool is_memory_op_kind(const std::string& name) {
  static const plan::OpKind kKinds[] = {
      plan::OpKind::cast_params, plan::OpKind::copy_out,        plan::OpKind::reshard_copy,
      plan::OpKind::grad_cast,   plan::OpKind::grad_accumulate, plan::OpKind::grad_norm,
      plan::OpKind::grad_scale,  plan::OpKind::inf_check,       plan::OpKind::optimizer};
  for (plan::OpKind k : kKinds)
    if (name == plan::op_kind_name(k)) return true;
  return false;
}

bool is_graph_op_type(const std::string& name) {
  try {
    (void)plan::parse_op_type(name, "");
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

namespace {
constexpr std::string_view kBackwardSuffix = ".backward";
bool has_backward_suffix(const std::string& key) {
  return key.size() > kBackwardSuffix.size() &&
         key.compare(key.size() - kBackwardSuffix.size(), kBackwardSuffix.size(),
                     kBackwardSuffix) == 0;
}
}  // namespace

std::string efficiency_key(const std::string& op_type, bool backward) {
  return backward ? op_type + std::string(kBackwardSuffix) : op_type;
}

bool is_efficiency_key(const std::string& name) {
  if (has_backward_suffix(name))
    return is_graph_op_type(name.substr(0, name.size() - kBackwardSuffix.size()));
  return is_graph_op_type(name);
}

std::optional<double> HardwareModel::exact_efficiency(const std::string& key, plan::DType dtype,
                                                      double flops) const {
  const auto c = efficiency_curves.find(dtype);
  if (c != efficiency_curves.end()) {
    const auto it = c->second.find(key);
    if (it != c->second.end() && !it->second.empty()) {
      const std::vector<EfficiencyKnot>& k = it->second;
      if (!(flops > k.front().flops)) {
        // Below the smallest knot: the first segment's log-linear slope
        // continued (small GEMMs lose efficiency as in the measured range),
        // never above the first knot's efficiency and never so low that
        // the smaller op would take longer than the knot's.
        const EfficiencyKnot& a = k[0];
        const EfficiencyKnot& b = k[1];
        const double slope = (b.efficiency - a.efficiency) / std::log(b.flops / a.flops);
        const double e = a.efficiency + slope * std::log(flops / a.flops);
        return std::min(a.efficiency, std::max(e, a.efficiency * flops / a.flops));
      }
      if (!(flops < k.back().flops)) return k.back().efficiency;
      size_t i = 1;
      while (k[i].flops < flops) ++i;  // k[i - 1].flops < flops <= k[i].flops
      const double t = std::log(flops / k[i - 1].flops) / std::log(k[i].flops / k[i - 1].flops);
      return k[i - 1].efficiency + t * (k[i].efficiency - k[i - 1].efficiency);
    }
  }
  const auto d = dtype_efficiency.find(dtype);
  if (d != dtype_efficiency.end()) {
    const auto it = d->second.find(key);
    if (it != d->second.end()) return it->second;
  }
  const auto it = efficiency.find(key);
  if (it != efficiency.end()) return it->second;
  return std::nullopt;
}

double HardwareModel::efficiency_of(const std::string& op_type) const {
  auto it = efficiency.find(op_type);
  if (it != efficiency.end()) return it->second;
  if (has_backward_suffix(op_type)) {
    it = efficiency.find(op_type.substr(0, op_type.size() - kBackwardSuffix.size()));
    if (it != efficiency.end()) return it->second;
  }
  it = efficiency.find("default");
  return it != efficiency.end() ? it->second : 1.0;
}

double HardwareModel::efficiency_of(const std::string& op_type, plan::DType dtype) const {
  const auto d = dtype_efficiency.find(dtype);
  if (d != dtype_efficiency.end()) {
    auto it = d->second.find(op_type);
    if (it != d->second.end()) return it->second;
    if (has_backward_suffix(op_type) && !efficiency.count(op_type)) {
      it = d->second.find(op_type.substr(0, op_type.size() - kBackwardSuffix.size()));
      if (it != d->second.end()) return it->second;
    }
  }
  return efficiency_of(op_type);
}

double HardwareModel::efficiency_of(const std::string& op_type, plan::DType dtype,
                                    double flops) const {
  if (const auto e = exact_efficiency(op_type, dtype, flops)) return *e;
  if (has_backward_suffix(op_type)) {
    const std::string forward = op_type.substr(0, op_type.size() - kBackwardSuffix.size());
    if (const auto e = exact_efficiency(forward, dtype, flops)) return *e;
  }
  return efficiency_of(op_type, dtype);
}

void HardwareModel::validate() const {
  auto positive = [&](double v, const char* field) {
    if (!(v > 0) || !std::isfinite(v))
      throw Error("hardware '" + name + "': " + field + " must be > 0");
  };
  positive(peak_flops_fp32, "peak_flops_fp32");
  positive(peak_flops_bf16, "peak_flops_bf16");
  positive(peak_flops_fp16, "peak_flops_fp16");
  positive(hbm_bytes_per_s, "hbm_bytes_per_s");
  positive(static_cast<double>(memory_bytes), "memory_bytes");
  positive(nvlink_bus_bytes_per_s, "nvlink_bus_bytes_per_s");
  positive(ib_bytes_per_s, "ib_bytes_per_s");
  positive(pcie_bytes_per_s, "pcie_bytes_per_s");
  positive(host_memory_bytes_per_s, "host_memory_bytes_per_s");
  positive(static_cast<double>(gpus_per_node), "gpus_per_node");
  const auto non_negative = [&](int64_t v, const char* field) {
    if (v < 0)
      throw Error("hardware '" + name + "': " + field + " must be >= 0, not " + std::to_string(v));
  };
  non_negative(blas_workspace_bytes, "blas_workspace_bytes");
  non_negative(blas_workspaces, "blas_workspaces");
  non_negative(nccl_channels, "nccl_channels");
  non_negative(nccl_buffsize_bytes, "nccl_buffsize_bytes");
  // Every latency and fixed overhead in [0, kMaxLatencyNs]: named with its
  // value and the limit (2^63-1 ns passed and overflowed the step's clock).
  const auto latency = [&](int64_t v, const std::string& field) {
    if (v < 0) throw Error("hardware '" + name + "': " + field + " must be >= 0");
    if (v > kMaxLatencyNs)
      throw Error("hardware '" + name + "': " + field + " = " + std::to_string(v) +
                  " exceeds the limit " + std::to_string(kMaxLatencyNs) +
                  " ns (1000 s; real latencies and overheads are microseconds, and a step of "
                  "millions of ops must stay within the int64 nanosecond clock)");
  };
  latency(nvlink_latency_ns, "nvlink_latency_ns");
  latency(ib_latency_ns, "ib_latency_ns");
  latency(collective_latency_ns, "collective_latency_ns");
  latency(launch_overhead_ns, "launch_overhead_ns");
  latency(op_dispatch_ns, "op_dispatch_ns");
  validate_op_level(op_level, name);
  if (launch_queue_depth < 1)
    throw Error("hardware '" + name + "': launch_queue_depth must be >= 1");
  for (size_t i = 0; i < collectives.size(); ++i) {
    const CollectiveFit& f = collectives[i];
    const std::string at = "hardware '" + name + "': collectives[" + std::to_string(i) + "].";
    if (!plan::is_collective(f.kind)) throw Error(at + "kind is not a collective");
    if (f.ranks < 2) throw Error(at + "ranks must be >= 2");
    const std::string index = "collectives[" + std::to_string(i) + "].";
    latency(f.latency_ns, index + "latency_ns");
    if (!(f.bus_bytes_per_s > 0) || !std::isfinite(f.bus_bytes_per_s))
      throw Error(at + "bus_bytes_per_s must be > 0");
    if (f.small_max_bytes < 0) throw Error(at + "small.max_bytes must be >= 0");
    if (f.small_max_bytes > 0) {
      latency(f.small_latency_ns, index + "small.latency_ns");
      if (!(f.small_bus_bytes_per_s > 0) || !std::isfinite(f.small_bus_bytes_per_s))
        throw Error(at + "small.bus_bytes_per_s must be > 0");
    }
    for (size_t j = 0; j < i; ++j)
      if (collectives[j].kind == f.kind && collectives[j].ranks == f.ranks &&
          collectives[j].multi_node == f.multi_node)
        throw Error(at + "duplicates collectives[" + std::to_string(j) + "]");
  }
  if (!(contention_factor >= 1.0) || !std::isfinite(contention_factor))
    throw Error("hardware '" + name + "': contention_factor must be >= 1");
  for (const auto& [type, e] : efficiency)
    if (!(e > 0 && e <= 1.0))
      throw Error("hardware '" + name + "': efficiency." + type + " must be in (0, 1]");
  for (const auto& [kind, fit] : memory_ops) {
    latency(fit.fixed_ns, "memory_ops." + kind + ".fixed_ns");
    if (!(fit.bandwidth_efficiency > 0 && fit.bandwidth_efficiency <= 1.0))
      throw Error("hardware '" + name + "': memory_ops." + kind +
                  ".bandwidth_efficiency must be in (0, 1]");
  }
  for (const auto& [dtype, curves] : efficiency_curves) {
    (void)peak_flops(dtype);  // a dtype without a compute peak has no efficiency
    for (const auto& [type, knots] : curves) {
      const std::string at =
          "hardware '" + name + "': efficiency_curves." + plan::dtype_name(dtype) + "." + type;
      if (knots.size() < 2) throw Error(at + " needs at least 2 knots");
      for (size_t i = 0; i < knots.size(); ++i) {
        if (!(knots[i].flops > 0) || !std::isfinite(knots[i].flops))
          throw Error(at + "[" + std::to_string(i) + "]: FLOPs must be > 0");
        if (i > 0 && !(knots[i].flops > knots[i - 1].flops))
          throw Error(at + "[" + std::to_string(i) + "]: FLOPs must ascend");
        if (!(knots[i].efficiency > 0 && knots[i].efficiency <= 1.0))
          throw Error(at + "[" + std::to_string(i) + "]: efficiency must be in (0, 1]");
      }
    }
  }
  for (const auto& [dtype, map] : dtype_efficiency) {
    (void)peak_flops(dtype);  // a dtype without a compute peak has no efficiency
    for (const auto& [type, e] : map)
      if (!(e > 0 && e <= 1.0))
        throw Error("hardware '" + name + "': dtype_efficiency." + plan::dtype_name(dtype) + "." +
                    type + " must be in (0, 1]");
  }
}

}  // namespace shardscope::sim
