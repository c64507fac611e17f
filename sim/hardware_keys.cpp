#include "sim/hardware_keys.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "plan/error.h"

namespace shardscope::sim {

using nlohmann::json;

namespace {

// --- value readers ---

template <typename T>
void read_field(const json& v, const std::string& key, const std::string& source, T* out) {
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
    } catch (const json::exception&) {
      throw Error(source + ": hardware key '" + key + "' has the wrong type");
    }
  }
}

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
void for_each_dtype_type(const json& doc, const std::string& key, const std::string& source,
                         Fn fn) {
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

// --- one value of a HardwareModel member, and its range ---

enum class Range {
  any,           // every value read is valid
  positive,      // > 0 and finite (bandwidths, peaks, sizes, counts)
  non_negative,  // >= 0 (workspace and NCCL buffer sizes and counts)
  latency,       // [0, kMaxLatencyNs] (every *_ns field)
};

// Every *_ns field: named with its value and the limit (2^63-1 ns passed
// and overflowed the step's clock).
void check_latency(const HardwareModel& hw, int64_t v, const std::string& field) {
  if (v < 0) throw Error("hardware '" + hw.name + "': " + field + " must be >= 0");
  if (v > kMaxLatencyNs)
    throw Error("hardware '" + hw.name + "': " + field + " = " + std::to_string(v) +
                " exceeds the limit " + std::to_string(kMaxLatencyNs) +
                " ns (1000 s; real latencies and overheads are microseconds, and a step of "
                "millions of ops must stay within the int64 nanosecond clock)");
}

template <auto Member>
void read_member(const json& v, const std::string& key, const std::string& source,
                 HardwareModel& hw) {
  read_field(v, key, source, &(hw.*Member));
}

template <auto Member>
void write_member(const HardwareModel& hw, const std::string& key, json& doc) {
  doc[key] = hw.*Member;
}

template <auto Member, Range R>
void check_member(const HardwareModel& hw, const std::string& key) {
  const auto v = hw.*Member;
  if constexpr (R == Range::positive) {
    const double d = static_cast<double>(v);
    if (!(d > 0) || !std::isfinite(d))
      throw Error("hardware '" + hw.name + "': " + key + " must be > 0");
  } else if constexpr (R == Range::non_negative) {
    if (v < 0)
      throw Error("hardware '" + hw.name + "': " + key + " must be >= 0, not " + std::to_string(v));
  } else if constexpr (R == Range::latency) {
    check_latency(hw, v, key);
  }
}

using ReadFn = void (*)(const json&, const std::string&, const std::string&, HardwareModel&);
using WriteFn = void (*)(const HardwareModel&, const std::string&, json&);
using CheckFn = void (*)(const HardwareModel&, const std::string&);

HardwareKey row(const char* name, ReadFn read, WriteFn write, CheckFn check = nullptr) {
  HardwareKey k;
  k.name = name;
  k.read = read;
  k.write = write;
  k.check = check;
  return k;
}

// A key that is one member read with read_field and written as it is.
template <auto Member, Range R = Range::any>
HardwareKey member_key(const char* name) {
  CheckFn check = nullptr;
  if constexpr (R != Range::any) check = check_member<Member, R>;
  return row(name, read_member<Member>, write_member<Member>, check);
}

// --- device: "cpu" | "sm_<major><minor>" (plan::parse_device_family) ---

void read_device(const json& v, const std::string& key, const std::string& source,
                 HardwareModel& hw) {
  std::string text;
  read_field(v, key, source, &text);
  try {
    hw.device = plan::parse_device_family(text, "hardware key '" + key + "'");
  } catch (const plan::Error& e) {
    throw Error(source + ": " + e.what());
  }
}

void write_device(const HardwareModel& hw, const std::string& key, json& doc) {
  doc[key] = plan::device_family_name(hw.device);
}

// --- all_reduce_algorithm: ring | tree | auto ---

void read_all_reduce_algorithm(const json& v, const std::string& key, const std::string& source,
                               HardwareModel& hw) {
  std::string a;
  read_field(v, key, source, &a);
  if (a == "ring")
    hw.all_reduce_algorithm = CollectiveAlgorithm::ring;
  else if (a == "tree")
    hw.all_reduce_algorithm = CollectiveAlgorithm::tree;
  else if (a == "auto")
    hw.all_reduce_algorithm = CollectiveAlgorithm::automatic;
  else
    throw Error(source + ": hardware key '" + key + "' must be ring, tree or auto, not '" + a +
                "'");
}

void write_all_reduce_algorithm(const HardwareModel& hw, const std::string& key, json& doc) {
  doc[key] = collective_algorithm_name(hw.all_reduce_algorithm);
}

// --- launch_queue_depth: >= 1 ---

void check_launch_queue_depth(const HardwareModel& hw, const std::string& key) {
  if (hw.launch_queue_depth < 1)
    throw Error("hardware '" + hw.name + "': " + key + " must be >= 1");
}

// --- contention_factor: >= 1 ---

void check_contention_factor(const HardwareModel& hw, const std::string& key) {
  if (!(hw.contention_factor >= 1.0) || !std::isfinite(hw.contention_factor))
    throw Error("hardware '" + hw.name + "': " + key + " must be >= 1");
}

// --- collectives: a list of fits, replacing the base's ---

CollectiveFit collective_fit_from_json(const json& v, const std::string& source,
                                       const std::string& at) {
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

void read_collectives(const json& v, const std::string& key, const std::string& source,
                      HardwareModel& hw) {
  // Replaces the base's list: a calibration describes one cluster.
  if (!v.is_array()) throw Error(source + ": hardware key '" + key + "' must be an array");
  hw.collectives.clear();
  for (size_t i = 0; i < v.size(); ++i)
    hw.collectives.push_back(
        collective_fit_from_json(v[i], source, key + "[" + std::to_string(i) + "]"));
}

void write_collectives(const HardwareModel& hw, const std::string& key, json& doc) {
  json fits = json::array();
  for (const CollectiveFit& f : hw.collectives) {
    json fit = {{"kind", plan::op_kind_name(f.kind)},
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
  doc[key] = fits;
}

void check_collectives(const HardwareModel& hw, const std::string& key) {
  const std::vector<CollectiveFit>& fits = hw.collectives;
  for (size_t i = 0; i < fits.size(); ++i) {
    const CollectiveFit& f = fits[i];
    const std::string index = key + "[" + std::to_string(i) + "].";
    const std::string at = "hardware '" + hw.name + "': " + index;
    if (!plan::is_collective(f.kind)) throw Error(at + "kind is not a collective");
    if (f.ranks < 2) throw Error(at + "ranks must be >= 2");
    check_latency(hw, f.latency_ns, index + "latency_ns");
    if (!(f.bus_bytes_per_s > 0) || !std::isfinite(f.bus_bytes_per_s))
      throw Error(at + "bus_bytes_per_s must be > 0");
    if (f.small_max_bytes < 0) throw Error(at + "small.max_bytes must be >= 0");
    if (f.small_max_bytes > 0) {
      check_latency(hw, f.small_latency_ns, index + "small.latency_ns");
      if (!(f.small_bus_bytes_per_s > 0) || !std::isfinite(f.small_bus_bytes_per_s))
        throw Error(at + "small.bus_bytes_per_s must be > 0");
    }
    for (size_t j = 0; j < i; ++j)
      if (fits[j].kind == f.kind && fits[j].ranks == f.ranks && fits[j].multi_node == f.multi_node)
        throw Error(at + "duplicates " + key + "[" + std::to_string(j) + "]");
  }
}

// --- efficiency: {op type or "default": fraction}, merged into the base's ---

void read_efficiency(const json& v, const std::string& key, const std::string& source,
                     HardwareModel& hw) {
  if (!v.is_object()) throw Error(source + ": hardware key '" + key + "' must be an object");
  for (const auto& [type, e] : v.items()) {
    check_op_type_key(type, source, key + "." + type, true);
    double value = 0;
    read_field(e, key + "." + type, source, &value);
    hw.efficiency[type] = value;
  }
}

void write_efficiency(const HardwareModel& hw, const std::string& key, json& doc) {
  doc[key] = hw.efficiency;
}

void check_efficiency(const HardwareModel& hw, const std::string& key) {
  for (const auto& [type, e] : hw.efficiency)
    if (!(e > 0 && e <= 1.0))
      throw Error("hardware '" + hw.name + "': " + key + "." + type + " must be in (0, 1]");
}

// --- memory_ops: {op kind without FLOPs: {fixed_ns, bandwidth_efficiency}} ---

void read_memory_ops(const json& v, const std::string& key, const std::string& source,
                     HardwareModel& hw) {
  if (!v.is_object()) throw Error(source + ": hardware key '" + key + "' must be an object");
  for (const auto& [kind, fit] : v.items()) {
    const std::string field = key + "." + kind;
    if (!is_memory_op_kind(kind))
      throw Error(source + ": hardware key '" + field + "': '" + kind +
                  "' is not an op kind without FLOPs (cast_params, copy_out, reshard_copy, "
                  "grad_cast, grad_accumulate, grad_norm, grad_scale, inf_check, optimizer)");
    if (!fit.is_object()) throw Error(source + ": hardware key '" + field + "' must be an object");
    MemoryOpFit m;
    for (const auto& [k, x] : fit.items()) {
      if (k == "fixed_ns")
        read_field(x, field + ".fixed_ns", source, &m.fixed_ns);
      else if (k == "bandwidth_efficiency")
        read_field(x, field + ".bandwidth_efficiency", source, &m.bandwidth_efficiency);
      else
        throw Error(source + ": unknown hardware key '" + field + "." + k + "'");
    }
    hw.memory_ops[kind] = m;
  }
}

void write_memory_ops(const HardwareModel& hw, const std::string& key, json& doc) {
  if (hw.memory_ops.empty()) return;
  json ops = json::object();
  for (const auto& [kind, fit] : hw.memory_ops)
    ops[kind] = {{"fixed_ns", fit.fixed_ns}, {"bandwidth_efficiency", fit.bandwidth_efficiency}};
  doc[key] = ops;
}

void check_memory_ops(const HardwareModel& hw, const std::string& key) {
  for (const auto& [kind, fit] : hw.memory_ops) {
    check_latency(hw, fit.fixed_ns, key + "." + kind + ".fixed_ns");
    if (!(fit.bandwidth_efficiency > 0 && fit.bandwidth_efficiency <= 1.0))
      throw Error("hardware '" + hw.name + "': " + key + "." + kind +
                  ".bandwidth_efficiency must be in (0, 1]");
  }
}

// --- efficiency_curves: {dtype: {op type: [[FLOPs, efficiency], ...]}} ---

void read_efficiency_curves(const json& v, const std::string& key, const std::string& source,
                            HardwareModel& hw) {
  for_each_dtype_type(
      v, key, source,
      [&](plan::DType dtype, const std::string& type, const json& points, const std::string& at) {
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
        hw.efficiency_curves[dtype][type] = knots;
      });
}

void write_efficiency_curves(const HardwareModel& hw, const std::string& key, json& doc) {
  if (hw.efficiency_curves.empty()) return;
  json curves = json::object();
  for (const auto& [dtype, map] : hw.efficiency_curves)
    for (const auto& [type, knots] : map) {
      json points = json::array();
      for (const EfficiencyKnot& k : knots) points.push_back({k.flops, k.efficiency});
      curves[plan::dtype_name(dtype)][type] = points;
    }
  doc[key] = curves;
}

void check_efficiency_curves(const HardwareModel& hw, const std::string& key) {
  for (const auto& [dtype, curves] : hw.efficiency_curves) {
    (void)hw.peak_flops(dtype);  // a dtype without a compute peak has no efficiency
    for (const auto& [type, knots] : curves) {
      const std::string at =
          "hardware '" + hw.name + "': " + key + "." + plan::dtype_name(dtype) + "." + type;
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
}

// --- dtype_efficiency: {dtype: {op type: fraction}}, merged into the base's ---

void read_dtype_efficiency(const json& v, const std::string& key, const std::string& source,
                           HardwareModel& hw) {
  for_each_dtype_type(
      v, key, source,
      [&](plan::DType dtype, const std::string& type, const json& e, const std::string& at) {
        read_field(e, at, source, &hw.dtype_efficiency[dtype][type]);
      });
}

void write_dtype_efficiency(const HardwareModel& hw, const std::string& key, json& doc) {
  if (hw.dtype_efficiency.empty()) return;
  json by_dtype = json::object();
  for (const auto& [dtype, map] : hw.dtype_efficiency) by_dtype[plan::dtype_name(dtype)] = map;
  doc[key] = by_dtype;
}

void check_dtype_efficiency(const HardwareModel& hw, const std::string& key) {
  for (const auto& [dtype, map] : hw.dtype_efficiency) {
    (void)hw.peak_flops(dtype);  // a dtype without a compute peak has no efficiency
    for (const auto& [type, e] : map)
      if (!(e > 0 && e <= 1.0))
        throw Error("hardware '" + hw.name + "': " + key + "." + plan::dtype_name(dtype) + "." +
                    type + " must be in (0, 1]");
  }
}

// --- op_level (sim/hardware_op_level.h) and fitted (sim/hardware_fitted.h) ---

void read_op_level(const json& v, const std::string&, const std::string& source,
                   HardwareModel& hw) {
  op_level_from_json(v, source, &hw.op_level);
}

void write_op_level(const HardwareModel& hw, const std::string& key, json& doc) {
  doc[key] = op_level_to_json(hw.op_level);
}

void check_op_level(const HardwareModel& hw, const std::string&) {
  validate_op_level(hw.op_level, hw.name);
}

void read_fitted(const json& v, const std::string&, const std::string& source, HardwareModel& hw) {
  hw.fitted = fitted_from_json(v, source);
}

void write_fitted(const HardwareModel& hw, const std::string& key, json& doc) {
  if (hw.fitted.calibrated) doc[key] = fitted_to_json(hw.fitted);
}

std::vector<HardwareKey> make_hardware_keys() {
  using H = HardwareModel;
  return {
      member_key<&H::name>("name"),
      row("device", read_device, write_device),
      member_key<&H::peak_flops_fp32, Range::positive>("peak_flops_fp32"),
      member_key<&H::peak_flops_bf16, Range::positive>("peak_flops_bf16"),
      member_key<&H::peak_flops_fp16, Range::positive>("peak_flops_fp16"),
      member_key<&H::hbm_bytes_per_s, Range::positive>("hbm_bytes_per_s"),
      member_key<&H::memory_bytes, Range::positive>("memory_bytes"),
      member_key<&H::nvlink_bus_bytes_per_s, Range::positive>("nvlink_bus_bytes_per_s"),
      member_key<&H::ib_bytes_per_s, Range::positive>("ib_bytes_per_s"),
      member_key<&H::pcie_bytes_per_s, Range::positive>("pcie_bytes_per_s"),
      member_key<&H::host_memory_bytes_per_s, Range::positive>("host_memory_bytes_per_s"),
      member_key<&H::gpus_per_node, Range::positive>("gpus_per_node"),
      member_key<&H::blas_workspace_bytes, Range::non_negative>("blas_workspace_bytes"),
      member_key<&H::blas_workspaces, Range::non_negative>("blas_workspaces"),
      member_key<&H::nccl_channels, Range::non_negative>("nccl_channels"),
      member_key<&H::nccl_buffsize_bytes, Range::non_negative>("nccl_buffsize_bytes"),
      member_key<&H::nvlink_latency_ns, Range::latency>("nvlink_latency_ns"),
      member_key<&H::ib_latency_ns, Range::latency>("ib_latency_ns"),
      member_key<&H::collective_latency_ns, Range::latency>("collective_latency_ns"),
      member_key<&H::launch_overhead_ns, Range::latency>("launch_overhead_ns"),
      member_key<&H::op_dispatch_ns, Range::latency>("op_dispatch_ns"),
      row("op_level", read_op_level, write_op_level, check_op_level),
      row("launch_queue_depth", read_member<&H::launch_queue_depth>,
          write_member<&H::launch_queue_depth>, check_launch_queue_depth),
      row("collectives", read_collectives, write_collectives, check_collectives),
      row("contention_factor", read_member<&H::contention_factor>,
          write_member<&H::contention_factor>, check_contention_factor),
      row("efficiency", read_efficiency, write_efficiency, check_efficiency),
      row("memory_ops", read_memory_ops, write_memory_ops, check_memory_ops),
      row("efficiency_curves", read_efficiency_curves, write_efficiency_curves,
          check_efficiency_curves),
      row("dtype_efficiency", read_dtype_efficiency, write_dtype_efficiency,
          check_dtype_efficiency),
      row("all_reduce_algorithm", read_all_reduce_algorithm, write_all_reduce_algorithm),
      row("fitted", read_fitted, write_fitted),
  };
}

}  // namespace

const std::vector<HardwareKey>& hardware_keys() {
  static const std::vector<HardwareKey> keys = make_hardware_keys();
  return keys;
}

const HardwareKey* find_hardware_key(std::string_view name) {
  for (const HardwareKey& k : hardware_keys())
    if (name == k.name) return &k;
  return nullptr;
}

std::string hardware_base(const json& doc, const std::string& source) {
  std::string base = "h100-sxm";
  if (const auto it = doc.find(kHardwareBaseKey); it != doc.end())
    read_field(*it, kHardwareBaseKey, source, &base);
  return base;
}

}  // namespace shardscope::sim
