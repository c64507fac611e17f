#include "plan/policy_values.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "plan/error.h"
#include "plan/json_input.h"
#include "plan/op_checkpointing.h"
#include "plan/policy_keys.h"

namespace shardscope::plan::policy_values {

using nlohmann::json;

[[noreturn]] void fail(const std::string& key, const std::string& what) {
  throw Error("policy: " + key + ": " + what);
}

bool get_bool(const json& v, const std::string& key) {
  if (!v.is_boolean()) fail(key, "expected true or false, got " + std::string(v.type_name()));
  return v.get<bool>();
}

int64_t get_int(const json& v, const std::string& key, int64_t lo) {
  if (!v.is_number_integer()) fail(key, "expected an integer, got " + v.dump());
  // An unsigned value above INT64_MAX would wrap to a negative one.
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(key, "out of range: " + v.dump() + " is above " +
                  std::to_string(std::numeric_limits<int64_t>::max()));
  int64_t x = v.get<int64_t>();
  if (x < lo) fail(key, "must be >= " + std::to_string(lo) + ", got " + std::to_string(x));
  return x;
}

double get_number(const json& v, const std::string& key) {
  if (!v.is_number()) fail(key, "expected a number, got " + v.dump());
  double x = v.get<double>();
  if (!std::isfinite(x)) fail(key, "must be finite");
  return x;
}

std::string get_string(const json& v, const std::string& key) {
  if (!v.is_string()) fail(key, "expected a string, got " + v.dump());
  return v.get<std::string>();
}

std::vector<std::string> get_string_list(const json& v, const std::string& key) {
  if (!v.is_array()) fail(key, "expected an array of strings, got " + v.dump());
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i)
    out.push_back(get_string(v[i], key + "[" + std::to_string(i) + "]"));
  return out;
}

DType get_float_dtype(const json& v, const std::string& key) {
  std::string s = get_string(v, key);
  if (s == "fp32" || s == "float32") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "fp16" || s == "float16") return DType::f16;
  fail(key, "unknown dtype '" + s + "' (use fp32, bf16 or fp16)");
}

const char* mp_dtype_name(DType d) {
  switch (d) {
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "fp16";
    default:
      return "fp32";
  }
}

void read_wrap(const json& v, WrapPolicy& w) {
  if (!v.is_object()) fail("wrap", "expected an object like {\"type\": \"class\", ...}");
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string key = "wrap." + it.key();
    if (it.key() == "type") {
      std::string t = get_string(*it, key);
      if (t == "none")
        w.type = WrapType::none;
      else if (t == "size")
        w.type = WrapType::size;
      else if (t == "class")
        w.type = WrapType::class_name;
      else if (t == "modules")
        w.type = WrapType::modules;
      else
        fail(key, "unknown wrap type '" + t + "' (use none, size, class, modules)");
    } else if (it.key() == "min_num_params") {
      w.min_num_params = get_int(*it, key, 1);
    } else if (it.key() == "classes") {
      w.classes = get_string_list(*it, key);
    } else if (it.key() == "modules") {
      w.modules = get_string_list(*it, key);
    } else {
      fail(key, "unknown key (wrap takes type, min_num_params, classes, modules)");
    }
  }
  if (w.type == WrapType::class_name && w.classes.empty())
    fail("wrap.classes", "the class policy needs a non-empty list of class names");
  if (w.type == WrapType::modules && w.modules.empty())
    fail("wrap.modules", "the modules policy needs a non-empty list of module paths");
  if (w.type != WrapType::class_name && !w.classes.empty())
    fail("wrap.classes", std::string("only applies to wrap.type \"class\", not \"") +
                             wrap_type_name(w.type) + "\"");
  if (w.type != WrapType::modules && !w.modules.empty())
    fail("wrap.modules", std::string("only applies to wrap.type \"modules\", not \"") +
                             wrap_type_name(w.type) + "\"");
}

void read_mixed_precision(const json& v, MixedPrecision& mp) {
  if (v.is_null()) {
    mp = MixedPrecision{};
    return;
  }
  if (!v.is_object()) fail("mixed_precision", "expected an object or null");
  bool reduce_given = false;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string key = "mixed_precision." + it.key();
    if (it.key() == "param_dtype") {
      mp.param_dtype = get_float_dtype(*it, key);
    } else if (it.key() == "reduce_dtype") {
      if (!it->is_null()) {
        mp.reduce_dtype = get_float_dtype(*it, key);
        reduce_given = true;
      }
    } else if (it.key() == "output_dtype") {
      if (it->is_null())
        mp.output_dtype.reset();
      else
        mp.output_dtype = get_float_dtype(*it, key);
    } else {
      fail(key, "unknown key (mixed_precision takes param_dtype, reduce_dtype, output_dtype)");
    }
  }
  // PyTorch: reduce_dtype None reduces in the param dtype.
  if (!reduce_given) mp.reduce_dtype = mp.param_dtype;
}

ReshardAfterForward read_reshard(const json& v, const std::string& key, Flavor flavor) {
  if (v.is_boolean()) return ReshardAfterForward{false, v.get<bool>(), 0};
  if (v.is_number_integer()) {
    if (flavor != Flavor::fsdp2)
      fail(key, "an integer applies to fsdp2 only (fsdp1 takes true or false)");
    return ReshardAfterForward{true, true, get_int(v, key, 1)};
  }
  fail(key, "expected true, false or an integer, got " + quote_input(v.dump()));
}

// token_balance: "uniform" | {"weights": [w_0, ..., w_{E-1}]}. Weights are
// >= 0 and sum to 1 (within 1e-6); their count and size against the model's
// experts are checked by validate_policy.
TokenBalanceSpec read_token_balance(const json& v) {
  const char* forms = "\"uniform\" or {\"weights\": [w_0, ..., w_{E-1}]} (fractions summing to 1)";
  TokenBalanceSpec spec;
  if (v.is_null()) return spec;
  if (v.is_string()) {
    if (v.get<std::string>() != "uniform")
      fail("token_balance",
           "unknown mode '" + quote_input(v.get<std::string>()) + "' (use " + forms + ")");
    return spec;
  }
  if (!v.is_object()) fail("token_balance", "expected " + std::string(forms));
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it.key() != "weights")
      fail("token_balance." + it.key(), "unknown key (the object form takes weights)");
  if (!v.contains("weights")) fail("token_balance.weights", "missing");
  const json& w = v.at("weights");
  if (!w.is_array() || w.empty())
    fail("token_balance.weights", "expected a non-empty array of numbers, one per expert");
  spec.explicit_weights = true;
  double sum = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const std::string key = "token_balance.weights[" + std::to_string(i) + "]";
    const double x = get_number(w[i], key);
    if (x < 0) fail(key, "must be >= 0, got " + w[i].dump());
    spec.weights.push_back(x);
    sum += x;
  }
  if (std::abs(sum - 1.0) > 1e-6) {
    char what[96];
    std::snprintf(what, sizeof what, "the weights sum to %.9g, not 1", sum);
    fail("token_balance.weights", what);
  }
  return spec;
}

void read_optimizer(const json& v, OptimizerConfig& o) {
  if (v.is_string()) {
    std::string t = v.get<std::string>();
    if (t != "adamw" && t != "sgd") fail("optimizer", "unknown optimizer '" + t + "' (adamw, sgd)");
    o = OptimizerConfig{};
    o.type = t == "sgd" ? OptimizerType::sgd : OptimizerType::adamw;
    if (o.type == OptimizerType::sgd) o.weight_decay = 0.0;
    return;
  }
  if (!v.is_object()) fail("optimizer", "expected \"adamw\", \"sgd\" or an object");
  if (v.contains("type")) read_optimizer(v.at("type"), o);
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string key = "optimizer." + it.key();
    const std::string& k = it.key();
    if (k == "type") continue;
    if (k == "lr") {
      o.lr = get_number(*it, key);
      if (o.lr < 0) fail(key, "must be >= 0");
    } else if (k == "betas") {
      if (!it->is_array() || it->size() != 2) fail(key, "expected [beta1, beta2]");
      o.beta1 = get_number((*it)[0], key + "[0]");
      o.beta2 = get_number((*it)[1], key + "[1]");
      if (o.beta1 < 0 || o.beta1 >= 1 || o.beta2 < 0 || o.beta2 >= 1)
        fail(key, "betas must lie in [0, 1)");
    } else if (k == "eps") {
      o.eps = get_number(*it, key);
      if (o.eps <= 0) fail(key, "must be > 0");
    } else if (k == "weight_decay") {
      o.weight_decay = get_number(*it, key);
      if (o.weight_decay < 0) fail(key, "must be >= 0");
    } else if (k == "momentum") {
      o.momentum = get_number(*it, key);
      if (o.momentum < 0 || o.momentum >= 1) fail(key, "must lie in [0, 1)");
    } else {
      fail(key, "unknown key (optimizer takes type, lr, betas, eps, weight_decay, momentum)");
    }
  }
  if (o.type == OptimizerType::adamw && o.momentum != 0.0)
    fail("optimizer.momentum", "applies to sgd only (adamw uses betas)");
}

json wrap_to_json(const WrapPolicy& w) {
  json j;
  j["type"] = wrap_type_name(w.type);
  j["min_num_params"] = w.min_num_params;
  if (w.type == WrapType::class_name) j["classes"] = w.classes;
  if (w.type == WrapType::modules) j["modules"] = w.modules;
  return j;
}

json mixed_precision_to_json(const MixedPrecision& mp) {
  return {
      {"param_dtype", mp_dtype_name(mp.param_dtype)},
      {"reduce_dtype", mp_dtype_name(mp.reduce_dtype)},
      {"output_dtype", mp.output_dtype ? json(mp_dtype_name(*mp.output_dtype)) : json(nullptr)}};
}

json reshard_to_json(const ReshardAfterForward& r) {
  return r.is_int ? json(r.k) : json(r.flag);
}

void read_activation_checkpointing(const json& v, const std::string& k, Policy& p) {
  if (v.is_string()) {
    std::string a = v.get<std::string>();
    if (a == "none")
      p.activation_checkpointing = CheckpointMode::none;
    else if (a == "full")
      p.activation_checkpointing = CheckpointMode::full;
    else
      fail(k, "unknown value '" + quote_input(a) +
                  "' (use \"none\", \"full\", {\"every\": k, \"offset\": o}, "
                  "{\"save_ops\": [...]} or {\"preset\": \"torchtitan\"})");
  } else if (v.is_object() && (v.contains("save_ops") || v.contains("preset"))) {
    read_op_checkpointing(v, k, p);  // plan/op_checkpointing.cpp
  } else if (v.is_object()) {
    if (!v.contains("every"))
      fail(k,
           "the object form is {\"every\": k, \"offset\": o}, {\"save_ops\": [...]} or "
           "{\"preset\": \"torchtitan\"}");
    for (auto field = v.begin(); field != v.end(); ++field)
      if (field.key() != "every" && field.key() != "offset")
        fail(k + "." + field.key(),
             "unknown key (the block form takes every and offset; the per-op form "
             "save_ops, save_every_other_matmul, every and offset)");
    p.activation_checkpointing = CheckpointMode::every;
    p.checkpoint_every = get_int(v.at("every"), k + ".every", 1);
    p.checkpoint_offset = v.contains("offset") ? get_int(v.at("offset"), k + ".offset", 0) : 0;
    if (p.checkpoint_offset >= p.checkpoint_every)
      fail(k + ".offset", std::to_string(p.checkpoint_offset) + " must be below every (" +
                              std::to_string(p.checkpoint_every) +
                              "): blocks j with j % every == offset are checkpointed");
  } else {
    fail(k,
         "expected \"none\", \"full\", {\"every\": k, \"offset\": o}, "
         "{\"save_ops\": [...]} or {\"preset\": \"torchtitan\"}");
  }
}

json activation_checkpointing_to_json(const Policy& p) {
  switch (p.activation_checkpointing) {
    case CheckpointMode::none:
      return "none";
    case CheckpointMode::full:
      return "full";
    case CheckpointMode::every: {
      json j{{"every", p.checkpoint_every}};
      // Written only when set, so that policies without it keep their JSON.
      if (p.checkpoint_offset != 0) j["offset"] = p.checkpoint_offset;
      return j;
    }
    case CheckpointMode::ops:
      return op_checkpointing_to_json(p);
  }
  return nullptr;
}

json optimizer_to_json(const OptimizerConfig& o) {
  json j;
  j["type"] = optimizer_type_name(o.type);
  j["lr"] = o.lr;
  j["betas"] = {o.beta1, o.beta2};
  j["eps"] = o.eps;
  j["weight_decay"] = o.weight_decay;
  j["momentum"] = o.momentum;
  return j;
}

// `overrides`: [{"units": regex | [names], "reshard_after_forward": ...,
// "mixed_precision": {...}}, ...], each entry's keys read by its row of
// override_keys(). A regex is compiled when read, once per policy
// (plan/unit_pattern.h: its syntax and limits are checked there). The units
// are resolved later, against the model's units (plan/overrides.cpp): that
// an override matches a unit is checked there.
std::vector<UnitOverride> read_overrides(const json& v, Flavor flavor) {
  if (v.is_null()) return {};
  if (!v.is_array())
    fail("overrides",
         "expected an array of objects like {\"units\": [\"layers.3\"], "
         "\"reshard_after_forward\": false}, got " +
             quote_input(v.dump()));
  std::vector<UnitOverride> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = "overrides[" + std::to_string(i) + "]";
    const json& o = v[i];
    if (!o.is_object()) fail(at, "expected an object, got " + quote_input(o.dump()));
    if (!o.contains("units"))
      fail(at + ".units", "missing: name the units (a regex string or a list of unit names)");
    UnitOverride ov;
    for (auto it = o.begin(); it != o.end(); ++it) {
      const std::string key = at + "." + it.key();
      const OverrideKey* row = nullptr;
      for (const OverrideKey& r : override_keys())
        if (it.key() == r.name) row = &r;
      if (!row) fail(key, "unknown key (an override takes " + override_key_names() + ")");
      row->read(*it, key, flavor, ov);
    }
    if (!ov.reshard_after_forward && !ov.mixed_precision)
      fail(at, "sets nothing (give reshard_after_forward and/or mixed_precision)");
    out.push_back(std::move(ov));
  }
  return out;
}

json overrides_to_json(const std::vector<UnitOverride>& overrides) {
  json list = json::array();
  for (const UnitOverride& ov : overrides) {
    json e = json::object();
    for (const OverrideKey& r : override_keys())
      if (r.write) r.write(ov, e);
    list.push_back(std::move(e));
  }
  return list;
}

}  // namespace shardscope::plan::policy_values
