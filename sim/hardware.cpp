// Hardware model lookups (efficiencies by op type, dtype and FLOPs; fitted
// collectives; peak FLOP/s) and validate(). Presets are
// sim/hardware_presets.cpp, JSON sim/hardware_json.cpp, each key's reader,
// writer and range sim/hardware_keys.cpp.
#include "sim/hardware.h"

#include <cmath>
#include <cstdint>

#include "sim/hardware_keys.h"

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

const char* cost_op_type(const plan::Op& op) {
  if (op.type != plan::OpType::aten) return plan::op_type_name(op.type);
  if (op.attrs.kind == plan::aten_kind_name(plan::AtenKind::gemm))
    return plan::op_type_name(plan::OpType::linear);
  if (op.attrs.kind == plan::aten_kind_name(plan::AtenKind::attention))
    return plan::op_type_name(plan::OpType::attention);
  return plan::op_type_name(plan::OpType::aten);
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
  // Each key's own range (sim/hardware_keys.cpp), in the table's order.
  for (const HardwareKey& k : hardware_keys())
    if (k.check) k.check(*this, k.name);
}

}  // namespace shardscope::sim
