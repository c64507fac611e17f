#include "sim/hardware_fitted.h"

#include "sim/hardware.h"

namespace shardscope::sim {

nlohmann::json fitted_to_json(const FittedCosts& f) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [dtype, keys] : f.efficiency)
    j[plan::dtype_name(dtype)] = std::vector<std::string>(keys.begin(), keys.end());
  return j;
}

FittedCosts fitted_from_json(const nlohmann::json& v, const std::string& source) {
  if (!v.is_object())
    throw Error(source + ": hardware key 'fitted' must be an object {dtype: [op type, ...]}");
  FittedCosts f;
  f.calibrated = true;
  for (const auto& [dtype_name, keys] : v.items()) {
    const std::string at = "fitted." + dtype_name;
    plan::DType dtype;
    try {
      dtype = plan::parse_dtype(dtype_name, source + ": hardware key '" + at + "'");
    } catch (const std::exception& e) {
      throw Error(e.what());
    }
    if (!keys.is_array()) throw Error(source + ": hardware key '" + at + "' must be an array");
    std::set<std::string>& set = f.efficiency[dtype];
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string item = at + "[" + std::to_string(i) + "]";
      if (!keys[i].is_string() || !is_efficiency_key(keys[i].get<std::string>()))
        throw Error(source + ": hardware key '" + item + "' must be an op type (linear, " +
                    "attention, ... optionally with '.backward'), got " + keys[i].dump());
      set.insert(keys[i].get<std::string>());
    }
  }
  return f;
}

std::vector<std::string> costs_from_base(const HardwareModel& hw, const plan::Graph& graph,
                                         const plan::Schedule& schedule) {
  if (!hw.fitted.calibrated) return {};
  std::set<std::string> out;
  for (const plan::ScheduleOp& op : schedule.ops) {
    if (op.graph_op < 0) continue;
    const bool backward = op.kind == plan::OpKind::backward;
    const std::string type = cost_op_type(graph.ops.at(static_cast<size_t>(op.graph_op)));
    const std::string key = efficiency_key(type, backward);
    const auto d = hw.fitted.efficiency.find(op.dtype);
    if (d != hw.fitted.efficiency.end() && d->second.count(key)) continue;
    out.insert(type + " " + plan::dtype_name(op.dtype) + (backward ? " backward" : " forward"));
  }
  return {out.begin(), out.end()};
}

}  // namespace shardscope::sim
