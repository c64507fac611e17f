#include "sim/hardware_op_level.h"

#include <climits>
#include <cmath>
#include <string>

#include "sim/hardware.h"

namespace shardscope::sim {

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

double read_double(const nlohmann::json& v, const std::string& key, const std::string& source) {
  if (!v.is_number())
    throw Error(source + ": hardware key '" + key + "' must be a number, got " + v.dump());
  return v.get<double>();
}

int64_t read_int(const nlohmann::json& v, const std::string& key, const std::string& source) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15)
      return static_cast<int64_t>(d);
  }
  throw Error(source + ": hardware key '" + key + "' must be an integer, got " + v.dump());
}

// A schedule op kind that is not a graph op's (forward, backward, recompute
// take efficiency keys): cast_params ... d2h, plan::op_kind_name's names.
bool is_non_graph_op_kind(const std::string& name) {
  for (int k = static_cast<int>(plan::OpKind::cast_params);
       k <= static_cast<int>(plan::OpKind::d2h); ++k)
    if (name == plan::op_kind_name(static_cast<plan::OpKind>(k))) return true;
  return false;
}

bool is_host_dispatch_key(const std::string& key) {
  return key == "default" || is_efficiency_key(key) || is_non_graph_op_kind(key);
}

void read_host_map(const nlohmann::json& x, const std::string& at, const std::string& source,
                   std::map<std::string, int64_t>* out) {
  if (!x.is_object()) throw Error(source + ": hardware key '" + at + "' must be an object");
  for (const auto& [key, y] : x.items()) {
    const std::string field = at + "." + key;
    if (!is_host_dispatch_key(key))
      throw Error(source + ": hardware key '" + field + "': '" + key +
                  "' is neither an op type (linear, attention, layernorm, ..., each optionally "
                  "with '.backward'), 'default', nor a schedule op kind (cast_params, copy_out, "
                  "all_gather, ..., optimizer)");
    (*out)[key] = read_int(y, field, source);
  }
}

// "<kernel>.hd<head_dim>[.backward]" with a fused CUDA kernel and head_dim
// written as attention_efficiency_key writes it (no sign, no leading zero).
bool is_attention_efficiency_key(const std::string& key) {
  std::string rest = key;
  const std::string suffix = ".backward";
  if (rest.size() > suffix.size() &&
      rest.compare(rest.size() - suffix.size(), suffix.size(), suffix) == 0)
    rest.resize(rest.size() - suffix.size());
  const size_t dot = rest.find(".hd");
  if (dot == std::string::npos) return false;
  const std::string kernel = rest.substr(0, dot), digits = rest.substr(dot + 3);
  if (kernel != "flash" && kernel != "cudnn" && kernel != "efficient") return false;
  return !digits.empty() && digits.size() <= 4 && digits[0] != '0' &&
         digits.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

std::string attention_efficiency_key(plan::SdpaKernel kernel, int64_t head_dim, bool backward) {
  return std::string(plan::sdpa_kernel_name(kernel)) + ".hd" + std::to_string(head_dim) +
         (backward ? ".backward" : "");
}

double OpLevelModel::attention_efficiency_of(plan::SdpaKernel kernel, int64_t head_dim,
                                             bool backward) const {
  if (attention_efficiency.empty()) return 0;
  const auto it = attention_efficiency.find(attention_efficiency_key(kernel, head_dim, backward));
  return it == attention_efficiency.end() ? 0 : it->second;
}

int64_t OpLevelModel::host_dispatch_ns_of(const std::string& key, bool forward_graph_op,
                                          int64_t params) const {
  int64_t ns = 0;
  if (const auto it = host_dispatch_ns.find(key); it != host_dispatch_ns.end())
    ns = it->second;
  else if (forward_graph_op)
    if (const auto d = host_dispatch_ns.find("default"); d != host_dispatch_ns.end())
      ns = d->second;
  if (const auto it = host_dispatch_per_param_ns.find(key);
      it != host_dispatch_per_param_ns.end()) {
    // Saturates: the simulator refuses a step clock past 2^63 ns, naming the hardware.
    int64_t per_unit = 0;
    if (__builtin_mul_overflow(params, it->second, &per_unit) ||
        __builtin_add_overflow(ns, per_unit, &ns))
      return INT64_MAX;
  }
  return ns;
}

double OpLevelModel::memory_efficiency_of(const std::string& key) const {
  if (const auto it = memory_efficiency.find(key); it != memory_efficiency.end()) return it->second;
  const std::string suffix = ".backward";
  if (key.size() > suffix.size() &&
      key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const auto it = memory_efficiency.find(key.substr(0, key.size() - suffix.size()));
    if (it != memory_efficiency.end()) return it->second;
  }
  return 1.0;
}

double gemm_wave_efficiency(const GemmShapeModel& gemm, double m, double n) {
  if (gemm.sm_count <= 0 || !(m > 0) || !(n > 0)) return 1.0;
  const double tiles = std::ceil(m / static_cast<double>(gemm.tile_m)) *
                       std::ceil(n / static_cast<double>(gemm.tile_n));
  const double slots =
      std::ceil(tiles / static_cast<double>(gemm.sm_count)) * static_cast<double>(gemm.sm_count);
  return tiles / slots;
}

double gemm_unaligned_efficiency(const GemmShapeModel& gemm, plan::DType dtype, int64_t in_features,
                                 int64_t out_features, bool backward) {
  if (dtype != plan::DType::bf16 && dtype != plan::DType::f16) return 0;
  const double e = backward ? gemm.unaligned_efficiency_backward : gemm.unaligned_efficiency;
  if (e <= 0 || gemm.alignment_elements <= 1) return 0;
  const bool aligned =
      in_features % gemm.alignment_elements == 0 && out_features % gemm.alignment_elements == 0;
  return aligned ? 0 : e;
}

nlohmann::json op_level_to_json(const OpLevelModel& m) {
  return {{"sustained_clock_fraction", m.sustained_clock_fraction},
          {"gemm",
           {{"sm_count", m.gemm.sm_count},
            {"tile_m", m.gemm.tile_m},
            {"tile_n", m.gemm.tile_n},
            {"alignment_elements", m.gemm.alignment_elements},
            {"unaligned_efficiency", m.gemm.unaligned_efficiency},
            {"unaligned_efficiency_backward", m.gemm.unaligned_efficiency_backward}}},
          {"memory_efficiency", m.memory_efficiency},
          {"upcast_bytes", m.upcast_bytes},
          {"host_dispatch_ns", m.host_dispatch_ns},
          {"host_dispatch_per_param_ns", m.host_dispatch_per_param_ns},
          {"attention_efficiency", m.attention_efficiency},
          {"math_attention", m.math_attention}};
}

void op_level_from_json(const nlohmann::json& v, const std::string& source, OpLevelModel* m) {
  if (!v.is_object()) throw Error(source + ": hardware key 'op_level' must be an object");
  for (const auto& [key, x] : v.items()) {
    const std::string at = "op_level." + key;
    if (key == "sustained_clock_fraction") {
      m->sustained_clock_fraction = read_double(x, at, source);
    } else if (key == "gemm") {
      if (!x.is_object()) throw Error(source + ": hardware key '" + at + "' must be an object");
      for (const auto& [k, y] : x.items()) {
        const std::string field = at + "." + k;
        if (k == "sm_count")
          m->gemm.sm_count = read_int(y, field, source);
        else if (k == "tile_m")
          m->gemm.tile_m = read_int(y, field, source);
        else if (k == "tile_n")
          m->gemm.tile_n = read_int(y, field, source);
        else if (k == "alignment_elements")
          m->gemm.alignment_elements = read_int(y, field, source);
        else if (k == "unaligned_efficiency")
          m->gemm.unaligned_efficiency = read_double(y, field, source);
        else if (k == "unaligned_efficiency_backward")
          m->gemm.unaligned_efficiency_backward = read_double(y, field, source);
        else
          throw Error(source + ": unknown hardware key '" + field +
                      "' (sm_count, tile_m, tile_n, alignment_elements, unaligned_efficiency, "
                      "unaligned_efficiency_backward)");
      }
    } else if (key == "upcast_bytes") {
      if (!x.is_boolean())
        throw Error(source + ": hardware key '" + at + "' must be true or false, got " + x.dump());
      m->upcast_bytes = x.get<bool>();
    } else if (key == "memory_efficiency") {
      if (!x.is_object()) throw Error(source + ": hardware key '" + at + "' must be an object");
      for (const auto& [type, y] : x.items()) {
        const std::string field = at + "." + type;
        if (!is_efficiency_key(type))
          throw Error(source + ": hardware key '" + field + "': '" + type +
                      "' is not an op type (embedding, linear, layernorm, rmsnorm, attention, "
                      "gelu, swiglu, residual, cross_entropy, rope, relu, ..., each optionally "
                      "with '.backward')");
        m->memory_efficiency[type] = read_double(y, field, source);
      }
    } else if (key == "math_attention") {
      if (!x.is_boolean())
        throw Error(source + ": hardware key '" + at + "' must be true or false, got " + x.dump());
      m->math_attention = x.get<bool>();
    } else if (key == "attention_efficiency") {
      if (!x.is_object()) throw Error(source + ": hardware key '" + at + "' must be an object");
      // Replaces the base's entries as a whole ({} clears them: the curve again).
      m->attention_efficiency.clear();
      for (const auto& [name, y] : x.items()) {
        const std::string field = at + "." + name;
        if (!is_attention_efficiency_key(name))
          throw Error(source + ": hardware key '" + field + "': '" + name +
                      "' is not '<kernel>.hd<head_dim>' with kernel flash, cudnn or efficient, "
                      "optionally with '.backward' (cudnn.hd64, flash.hd128.backward; the math "
                      "kernel is costed by math_attention)");
        m->attention_efficiency[name] = read_double(y, field, source);
      }
    } else if (key == "host_dispatch_ns") {
      read_host_map(x, at, source, &m->host_dispatch_ns);
    } else if (key == "host_dispatch_per_param_ns") {
      read_host_map(x, at, source, &m->host_dispatch_per_param_ns);
    } else {
      throw Error(source + ": unknown hardware key '" + at +
                  "' (sustained_clock_fraction, gemm, memory_efficiency, upcast_bytes, "
                  "host_dispatch_ns, host_dispatch_per_param_ns, attention_efficiency, "
                  "math_attention)");
    }
  }
}

void validate_op_level(const OpLevelModel& m, const std::string& hardware_name) {
  const std::string at = "hardware '" + hardware_name + "': op_level.";
  const auto fraction = [&](double v, const std::string& field, bool zero_ok) {
    if (!std::isfinite(v) || v > 1 || (zero_ok ? v < 0 : !(v > 0)))
      throw Error(at + field + " = " + number(v) + " is out of range " +
                  (zero_ok ? "[0, 1]" : "(0, 1]"));
  };
  fraction(m.sustained_clock_fraction, "sustained_clock_fraction", false);
  fraction(m.gemm.unaligned_efficiency, "gemm.unaligned_efficiency", true);
  fraction(m.gemm.unaligned_efficiency_backward, "gemm.unaligned_efficiency_backward", true);
  const auto count = [&](int64_t v, const std::string& field, int64_t lo) {
    // 2^20 bounds every count: no GPU has a million SMs or a tile that wide.
    if (v < lo || v > (int64_t{1} << 20))
      throw Error(at + field + " = " + std::to_string(v) + " is out of range [" +
                  std::to_string(lo) + ", 1048576]");
  };
  count(m.gemm.sm_count, "gemm.sm_count", 0);
  count(m.gemm.tile_m, "gemm.tile_m", 1);
  count(m.gemm.tile_n, "gemm.tile_n", 1);
  count(m.gemm.alignment_elements, "gemm.alignment_elements", 1);
  for (const auto& [type, v] : m.memory_efficiency) fraction(v, "memory_efficiency." + type, false);
  for (const auto& [key, v] : m.attention_efficiency)
    fraction(v, "attention_efficiency." + key, false);
  const auto host = [&](const std::map<std::string, int64_t>& map, const std::string& name) {
    for (const auto& [key, v] : map)
      if (v < 0 || v > kMaxLatencyNs)
        throw Error(at + name + "." + key + " = " + std::to_string(v) + " is out of range [0, " +
                    std::to_string(kMaxLatencyNs) + "]");
  };
  host(m.host_dispatch_ns, "host_dispatch_ns");
  host(m.host_dispatch_per_param_ns, "host_dispatch_per_param_ns");
}

}  // namespace shardscope::sim
