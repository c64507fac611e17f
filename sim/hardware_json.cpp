// Hardware models as JSON: hardware_to_json, hardware_from_json (strict:
// unknown keys and out-of-range values are errors naming the key) and
// load_hardware (a preset name or a file).
#include "sim/hardware.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <type_traits>

#include "plan/error.h"
#include "plan/json_input.h"

namespace shardscope::sim {

namespace {

template <typename T>
void read_field(const nlohmann::json& v, const std::string& key, const std::string& source,
                T* out) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // Integers may be written as JSON integers or as integral numbers such as
    // 80e9; anything else (a fraction, out of range) is an error, never a
    // silent (undefined) conversion.
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max()))
      throw Error(source + ": hardware key '" + key + "' is out of range");
    if (v.is_number_integer()) {
      const int64_t x = v.get<int64_t>();
      if (x < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
          x > static_cast<int64_t>(std::numeric_limits<T>::max()))
        throw Error(source + ": hardware key '" + key + "' is out of range");
      *out = static_cast<T>(x);
      return;
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      // [min, max] of T as doubles; 2^63 itself is out of range for int64.
      const double lo = static_cast<double>(std::numeric_limits<T>::min());
      const double hi = -lo;
      if (!std::isfinite(d) || d != std::floor(d) || d < lo || d >= hi)
        throw Error(source + ": hardware key '" + key + "' must be an integer in range, got " +
                    v.dump());
      *out = static_cast<T>(d);
      return;
    }
    throw Error(source + ": hardware key '" + key + "' has the wrong type");
  } else {
    try {
      *out = v.get<T>();
    } catch (const nlohmann::json::exception&) {
      throw Error(source + ": hardware key '" + key + "' has the wrong type");
    }
  }
}

CollectiveFit collective_fit_from_json(const nlohmann::json& v, const std::string& source,
                                       size_t index) {
  const std::string at = "collectives[" + std::to_string(index) + "]";
  if (!v.is_object()) throw Error(source + ": hardware key '" + at + "' must be an object");
  CollectiveFit f;
  bool have_kind = false, have_ranks = false, have_bw = false;
  for (const auto& [key, x] : v.items()) {
    const std::string field = at + "." + key;
    if (key == "kind") {
      std::string k;
      read_field(x, field, source, &k);
      if (k == "all_gather")
        f.kind = plan::OpKind::all_gather;
      else if (k == "reduce_scatter")
        f.kind = plan::OpKind::reduce_scatter;
      else if (k == "all_reduce")
        f.kind = plan::OpKind::all_reduce;
      else
        throw Error(source + ": hardware key '" + field +
                    "' must be all_gather, reduce_scatter or all_reduce, not '" + k + "'");
      have_kind = true;
    } else if (key == "ranks") {
      read_field(x, field, source, &f.ranks);
      have_ranks = true;
    } else if (key == "multi_node") {
      read_field(x, field, source, &f.multi_node);
    } else if (key == "latency_ns") {
      read_field(x, field, source, &f.latency_ns);
    } else if (key == "bus_bytes_per_s") {
      read_field(x, field, source, &f.bus_bytes_per_s);
      have_bw = true;
    } else if (key == "small") {
      if (!x.is_object())
        throw Error(source + ": hardware key '" + field +
                    "' must be an object {max_bytes, latency_ns, bus_bytes_per_s}");
      bool have_max = false, have_small_bw = false;
      for (const auto& [k, y] : x.items()) {
        const std::string sub = field + "." + k;
        if (k == "max_bytes") {
          read_field(y, sub, source, &f.small_max_bytes);
          have_max = true;
        } else if (k == "latency_ns") {
          read_field(y, sub, source, &f.small_latency_ns);
        } else if (k == "bus_bytes_per_s") {
          read_field(y, sub, source, &f.small_bus_bytes_per_s);
          have_small_bw = true;
        } else {
          throw Error(source + ": unknown hardware key '" + sub + "'");
        }
      }
      if (!have_max) throw Error(source + ": hardware key '" + field + ".max_bytes' is missing");
      if (!have_small_bw)
        throw Error(source + ": hardware key '" + field + ".bus_bytes_per_s' is missing");
    } else {
      throw Error(source + ": unknown hardware key '" + field + "'");
    }
  }
  if (!have_kind) throw Error(source + ": hardware key '" + at + ".kind' is missing");
  if (!have_ranks) throw Error(source + ": hardware key '" + at + ".ranks' is missing");
  if (!have_bw) throw Error(source + ": hardware key '" + at + ".bus_bytes_per_s' is missing");
  return f;
}

}  // namespace

namespace {
// "device": "cpu" | "sm_<major><minor>" (plan::parse_device_family).
plan::DeviceFamily read_device(const nlohmann::json& v, const std::string& source) {
  std::string text;
  read_field(v, "device", source, &text);
  try {
    return plan::parse_device_family(text, "hardware key 'device'");
  } catch (const plan::Error& e) {
    throw Error(source + ": " + e.what());
  }
}
}  // namespace

nlohmann::json hardware_to_json(const HardwareModel& hw) {
  nlohmann::json j;
  j["name"] = hw.name;
  j["device"] = plan::device_family_name(hw.device);
  j["peak_flops_fp32"] = hw.peak_flops_fp32;
  j["peak_flops_bf16"] = hw.peak_flops_bf16;
  j["peak_flops_fp16"] = hw.peak_flops_fp16;
  j["hbm_bytes_per_s"] = hw.hbm_bytes_per_s;
  j["memory_bytes"] = hw.memory_bytes;
  j["nvlink_bus_bytes_per_s"] = hw.nvlink_bus_bytes_per_s;
  j["nvlink_latency_ns"] = hw.nvlink_latency_ns;
  j["ib_bytes_per_s"] = hw.ib_bytes_per_s;
  j["ib_latency_ns"] = hw.ib_latency_ns;
  j["collective_latency_ns"] = hw.collective_latency_ns;
  j["all_reduce_algorithm"] = collective_algorithm_name(hw.all_reduce_algorithm);
  nlohmann::json fits = nlohmann::json::array();
  for (const CollectiveFit& f : hw.collectives) {
    nlohmann::json fit = {{"kind", plan::op_kind_name(f.kind)},
                          {"ranks", f.ranks},
                          {"multi_node", f.multi_node},
                          {"latency_ns", f.latency_ns},
                          {"bus_bytes_per_s", f.bus_bytes_per_s}};
    if (f.small_max_bytes > 0)
      fit["small"] = {{"max_bytes", f.small_max_bytes},
                      {"latency_ns", f.small_latency_ns},
                      {"bus_bytes_per_s", f.small_bus_bytes_per_s}};
    fits.push_back(fit);
  }
  j["collectives"] = fits;
  j["pcie_bytes_per_s"] = hw.pcie_bytes_per_s;
  j["host_memory_bytes_per_s"] = hw.host_memory_bytes_per_s;
  j["efficiency"] = hw.efficiency;
  if (!hw.dtype_efficiency.empty()) {
    nlohmann::json by_dtype = nlohmann::json::object();
    for (const auto& [dtype, map] : hw.dtype_efficiency) by_dtype[plan::dtype_name(dtype)] = map;
    j["dtype_efficiency"] = by_dtype;
  }
  if (!hw.memory_ops.empty()) {
    nlohmann::json ops = nlohmann::json::object();
    for (const auto& [kind, fit] : hw.memory_ops)
      ops[kind] = {{"fixed_ns", fit.fixed_ns}, {"bandwidth_efficiency", fit.bandwidth_efficiency}};
    j["memory_ops"] = ops;
  }
  if (!hw.efficiency_curves.empty()) {
    nlohmann::json curves = nlohmann::json::object();
    for (const auto& [dtype, map] : hw.efficiency_curves)
      for (const auto& [type, knots] : map) {
        nlohmann::json points = nlohmann::json::array();
        for (const EfficiencyKnot& k : knots) points.push_back({k.flops, k.efficiency});
        curves[plan::dtype_name(dtype)][type] = points;
      }
    j["efficiency_curves"] = curves;
  }
  j["launch_overhead_ns"] = hw.launch_overhead_ns;
  j["op_dispatch_ns"] = hw.op_dispatch_ns;
  j["launch_queue_depth"] = hw.launch_queue_depth;
  j["contention_factor"] = hw.contention_factor;
  j["gpus_per_node"] = hw.gpus_per_node;
  j["blas_workspace_bytes"] = hw.blas_workspace_bytes;
  j["blas_workspaces"] = hw.blas_workspaces;
  j["nccl_channels"] = hw.nccl_channels;
  j["nccl_buffsize_bytes"] = hw.nccl_buffsize_bytes;
  j["op_level"] = op_level_to_json(hw.op_level);
  if (hw.fitted.calibrated) j["fitted"] = fitted_to_json(hw.fitted);
  return j;
}

namespace {
// An efficiency key must be a graph op type (or "default" where allowed):
// a misspelt type would otherwise be kept and never used.
void check_op_type_key(const std::string& type, const std::string& source, const std::string& field,
                       bool allow_default) {
  if (is_efficiency_key(type) || (allow_default && type == "default")) return;
  throw Error(source + ": hardware key '" + field + "': '" + type +
              "' is not an op type (embedding, linear, layernorm, rmsnorm, attention, gelu, "
              "swiglu, residual, cross_entropy, rope, relu, each optionally with '.backward'" +
              (allow_default ? ", or default" : "") + ")");
}

plan::DType dtype_field(const std::string& name, const std::string& source,
                        const std::string& field) {
  try {
    return plan::parse_dtype(name, source + ": " + field);
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
}

// `doc` under `key` is {dtype: {op type: value}}: checks both levels (dtype
// names, graph op types, objects) and calls fn(dtype, type, value, "key.dtype.type").
template <typename Fn>
void for_each_dtype_type(const nlohmann::json& doc, const std::string& key,
                         const std::string& source, Fn fn) {
  if (!doc.is_object()) throw Error(source + ": hardware key '" + key + "' must be an object");
  for (const auto& [dtype_name, map] : doc.items()) {
    const std::string field = key + "." + dtype_name;
    const plan::DType dtype = dtype_field(dtype_name, source, field);
    if (!map.is_object()) throw Error(source + ": hardware key '" + field + "' must be an object");
    for (const auto& [type, value] : map.items()) {
      const std::string at = field + "." + type;
      check_op_type_key(type, source, at, false);
      fn(dtype, type, value, at);
    }
  }
}
}  // namespace

HardwareModel hardware_from_json(const nlohmann::json& doc, const std::string& source) {
  if (!doc.is_object()) throw Error(source + ": a hardware document must be a JSON object");
  std::string base = "h100-sxm";
  if (doc.contains("base")) read_field(doc.at("base"), "base", source, &base);
  HardwareModel h = hardware_preset(base);
  h.name = source;
  // An efficiency the document sets for a type (in `efficiency`, or in
  // `dtype_efficiency` for one dtype) replaces the base's curves for that
  // type and its backward: a preset's published curve would otherwise take
  // precedence over it. Curves the document gives itself are read afterwards. Malformed
  // entries are left to the main loop, which names them.
  const auto drop_base_curves = [&](const nlohmann::json& map, std::optional<plan::DType> dtype) {
    if (!map.is_object()) return;
    for (const auto& [type, value] : map.items()) {
      (void)value;
      for (auto& [d, curves] : h.efficiency_curves)
        if (!dtype || d == *dtype) {
          curves.erase(type);
          // "attention" covers its backward ops too, unless given apart.
          if (!map.contains(efficiency_key(type, true))) curves.erase(efficiency_key(type, true));
        }
    }
  };
  if (const auto e = doc.find("efficiency"); e != doc.end()) drop_base_curves(*e, std::nullopt);
  if (const auto e = doc.find("dtype_efficiency"); e != doc.end() && e->is_object())
    for (const auto& [dtype_name, map] : e->items()) {
      plan::DType d;
      try {
        d = plan::parse_dtype(dtype_name, source);
      } catch (const std::exception&) {
        continue;
      }
      drop_base_curves(map, d);
    }
  for (const auto& [key, v] : doc.items()) {
    if (key == "base") continue;
    if (key == "name")
      read_field(v, key, source, &h.name);
    else if (key == "device")
      h.device = read_device(v, source);
    else if (key == "peak_flops_fp32")
      read_field(v, key, source, &h.peak_flops_fp32);
    else if (key == "peak_flops_bf16")
      read_field(v, key, source, &h.peak_flops_bf16);
    else if (key == "peak_flops_fp16")
      read_field(v, key, source, &h.peak_flops_fp16);
    else if (key == "hbm_bytes_per_s")
      read_field(v, key, source, &h.hbm_bytes_per_s);
    else if (key == "memory_bytes")
      read_field(v, key, source, &h.memory_bytes);
    else if (key == "nvlink_bus_bytes_per_s")
      read_field(v, key, source, &h.nvlink_bus_bytes_per_s);
    else if (key == "nvlink_latency_ns")
      read_field(v, key, source, &h.nvlink_latency_ns);
    else if (key == "ib_bytes_per_s")
      read_field(v, key, source, &h.ib_bytes_per_s);
    else if (key == "ib_latency_ns")
      read_field(v, key, source, &h.ib_latency_ns);
    else if (key == "pcie_bytes_per_s")
      read_field(v, key, source, &h.pcie_bytes_per_s);
    else if (key == "host_memory_bytes_per_s")
      read_field(v, key, source, &h.host_memory_bytes_per_s);
    else if (key == "launch_overhead_ns")
      read_field(v, key, source, &h.launch_overhead_ns);
    else if (key == "op_dispatch_ns")
      read_field(v, key, source, &h.op_dispatch_ns);
    else if (key == "launch_queue_depth")
      read_field(v, key, source, &h.launch_queue_depth);
    else if (key == "collective_latency_ns")
      read_field(v, key, source, &h.collective_latency_ns);
    else if (key == "all_reduce_algorithm") {
      std::string a;
      read_field(v, key, source, &a);
      if (a == "ring")
        h.all_reduce_algorithm = CollectiveAlgorithm::ring;
      else if (a == "tree")
        h.all_reduce_algorithm = CollectiveAlgorithm::tree;
      else if (a == "auto")
        h.all_reduce_algorithm = CollectiveAlgorithm::automatic;
      else
        throw Error(source +
                    ": hardware key 'all_reduce_algorithm' must be ring, tree or auto, not '" + a +
                    "'");
    } else if (key == "collectives") {
      // Replaces the base's list: a calibration describes one cluster.
      if (!v.is_array()) throw Error(source + ": hardware key 'collectives' must be an array");
      h.collectives.clear();
      for (size_t i = 0; i < v.size(); ++i)
        h.collectives.push_back(collective_fit_from_json(v[i], source, i));
    } else if (key == "contention_factor")
      read_field(v, key, source, &h.contention_factor);
    else if (key == "gpus_per_node")
      read_field(v, key, source, &h.gpus_per_node);
    else if (key == "blas_workspace_bytes")
      read_field(v, key, source, &h.blas_workspace_bytes);
    else if (key == "blas_workspaces")
      read_field(v, key, source, &h.blas_workspaces);
    else if (key == "nccl_channels")
      read_field(v, key, source, &h.nccl_channels);
    else if (key == "nccl_buffsize_bytes")
      read_field(v, key, source, &h.nccl_buffsize_bytes);
    else if (key == "efficiency") {
      if (!v.is_object()) throw Error(source + ": hardware key 'efficiency' must be an object");
      for (const auto& [type, e] : v.items()) {
        check_op_type_key(type, source, "efficiency." + type, true);
        double value = 0;
        read_field(e, "efficiency." + type, source, &value);
        h.efficiency[type] = value;
      }
    } else if (key == "memory_ops") {
      if (!v.is_object()) throw Error(source + ": hardware key 'memory_ops' must be an object");
      for (const auto& [kind, fit] : v.items()) {
        const std::string field = "memory_ops." + kind;
        if (!is_memory_op_kind(kind))
          throw Error(source + ": hardware key '" + field + "': '" + kind +
                      "' is not an op kind without FLOPs (cast_params, copy_out, reshard_copy, "
                      "grad_cast, grad_accumulate, grad_norm, grad_scale, inf_check, optimizer)");
        if (!fit.is_object())
          throw Error(source + ": hardware key '" + field + "' must be an object");
        MemoryOpFit m;
        for (const auto& [k, x] : fit.items()) {
          if (k == "fixed_ns")
            read_field(x, field + ".fixed_ns", source, &m.fixed_ns);
          else if (k == "bandwidth_efficiency")
            read_field(x, field + ".bandwidth_efficiency", source, &m.bandwidth_efficiency);
          else
            throw Error(source + ": unknown hardware key '" + field + "." + k + "'");
        }
        h.memory_ops[kind] = m;
      }
    } else if (key == "efficiency_curves") {
      for_each_dtype_type(
          v, key, source,
          [&](plan::DType dtype, const std::string& type, const nlohmann::json& points,
              const std::string& at) {
            if (!points.is_array())
              throw Error(source + ": hardware key '" + at +
                          "' must be an array of [FLOPs, efficiency]");
            std::vector<EfficiencyKnot> knots;
            for (size_t i = 0; i < points.size(); ++i) {
              const std::string item = at + "[" + std::to_string(i) + "]";
              if (!points[i].is_array() || points[i].size() != 2)
                throw Error(source + ": hardware key '" + item + "' must be [FLOPs, efficiency]");
              EfficiencyKnot k;
              read_field(points[i][0], item + "[0]", source, &k.flops);
              read_field(points[i][1], item + "[1]", source, &k.efficiency);
              knots.push_back(k);
            }
            h.efficiency_curves[dtype][type] = knots;
          });
    } else if (key == "op_level") {
      op_level_from_json(v, source, &h.op_level);
    } else if (key == "fitted") {
      h.fitted = fitted_from_json(v, source);
    } else if (key == "dtype_efficiency") {
      for_each_dtype_type(v, key, source,
                          [&](plan::DType dtype, const std::string& type, const nlohmann::json& e,
                              const std::string& at) {
                            read_field(e, at, source, &h.dtype_efficiency[dtype][type]);
                          });
    } else {
      throw Error(source + ": unknown hardware key '" + key + "'");
    }
  }
  h.validate();
  return h;
}

HardwareModel load_hardware(const std::string& spec) {
  if (is_hardware_preset(spec)) return hardware_preset(spec);
  std::error_code ec;
  if (!std::filesystem::exists(spec, ec))
    throw Error(
        "hardware '" + spec +
        "' is neither a preset (h100-sxm, h200-sxm, a100-sxm, h100-pcie, cpu-local) nor a readable "
        "file");
  nlohmann::json doc;
  try {
    doc = plan::load_json_input(spec, "hardware");
  } catch (const plan::Error& e) {
    throw Error(e.what());
  }
  return hardware_from_json(doc, spec);
}

}  // namespace shardscope::sim
