#include "plan/policy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>

#include "plan/error.h"
#include "plan/json_input.h"

namespace shardscope::plan {

using nlohmann::json;

const char* flavor_name(Flavor f) {
  return f == Flavor::fsdp1 ? "fsdp1" : "fsdp2";
}

const char* wrap_type_name(WrapType w) {
  switch (w) {
    case WrapType::none:
      return "none";
    case WrapType::size:
      return "size";
    case WrapType::class_name:
      return "class";
    case WrapType::modules:
      return "modules";
  }
  return "?";
}

const char* backward_prefetch_name(BackwardPrefetch b) {
  switch (b) {
    case BackwardPrefetch::none:
      return "none";
    case BackwardPrefetch::pre:
      return "pre";
    case BackwardPrefetch::post:
      return "post";
  }
  return "?";
}

const char* optimizer_type_name(OptimizerType type) {
  switch (type) {
    case OptimizerType::adamw:
      return "adamw";
    case OptimizerType::sgd:
      return "sgd";
  }
  return "?";
}

int OptimizerConfig::state_tensors() const {
  if (type == OptimizerType::adamw) return 2;
  return momentum != 0.0 ? 1 : 0;
}

Policy default_policy(Flavor flavor) {
  Policy p;
  p.flavor = flavor;
  p.backward_prefetch = BackwardPrefetch::pre;
  p.limit_all_gathers = flavor == Flavor::fsdp1;
  return p;
}

namespace {

[[noreturn]] void fail(const std::string& key, const std::string& what) {
  throw Error("policy: " + key + ": " + what);
}

std::string type_name(const json& v) {
  return v.type_name();
}

bool get_bool(const json& v, const std::string& key) {
  if (!v.is_boolean()) fail(key, "expected true or false, got " + type_name(v));
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

// `overrides`: [{"units": regex | [names], "reshard_after_forward": ...,
// "mixed_precision": {...}}, ...]. A regex is compiled here, once per policy
// (plan/unit_pattern.h: its syntax and limits are checked here). The units
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
      const json& x = *it;
      if (it.key() == "units") {
        if (x.is_string()) {
          ov.pattern = std::make_shared<const UnitPattern>(x.get<std::string>(), "policy: " + key);
        } else if (x.is_array()) {
          ov.names = get_string_list(x, key);
          if (ov.names.empty()) fail(key, "an empty list names no unit");
        } else {
          fail(key,
               "expected a regex string or a list of unit names, got " + quote_input(x.dump()));
        }
      } else if (it.key() == "reshard_after_forward") {
        ov.reshard_after_forward = read_reshard(x, key, flavor);
      } else if (it.key() == "mixed_precision") {
        MixedPrecision mp;
        if (!x.is_object())
          fail(key, "expected an object (param_dtype, reduce_dtype, output_dtype)");
        try {
          read_mixed_precision(x, mp);
        } catch (const Error& e) {
          // "policy: mixed_precision.X: ..." -> "policy: overrides[i].mixed_precision.X: ..."
          std::string msg = e.what();
          const std::string prefix = "policy: ";
          throw Error(prefix + at + "." + msg.substr(prefix.size()));
        }
        ov.mixed_precision = mp;
      } else if (it.key() == "cpu_offload") {
        fail(key,
             "per-unit CPU offload is not modelled (the optimizer step would run partly on the "
             "host); set the policy's cpu_offload for every unit");
      } else {
        fail(key, "unknown key (an override takes units, reshard_after_forward, mixed_precision)");
      }
    }
    if (!ov.reshard_after_forward && !ov.mixed_precision)
      fail(at, "sets nothing (give reshard_after_forward and/or mixed_precision)");
    out.push_back(std::move(ov));
  }
  return out;
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

}  // namespace

Policy policy_from_json(const json& doc) {
  if (!doc.is_object()) throw Error("policy: expected a JSON object at the top level");
  Flavor flavor = Flavor::fsdp2;
  if (doc.contains("flavor")) {
    std::string f = get_string(doc.at("flavor"), "flavor");
    if (f == "fsdp1")
      flavor = Flavor::fsdp1;
    else if (f == "fsdp2")
      flavor = Flavor::fsdp2;
    else
      fail("flavor", "unknown flavor '" + f + "' (use fsdp1 or fsdp2)");
  }
  Policy p = default_policy(flavor);
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& k = it.key();
    const json& v = *it;
    if (k == "flavor") continue;
    if (k == "world_size") {
      if (!v.is_null()) p.world_size = get_int(v, k, 1);
    } else if (k == "shard_group_size") {
      if (v.is_null())
        p.shard_group_size.reset();
      else
        p.shard_group_size = get_int(v, k, 1);
    } else if (k == "wrap") {
      p.wrap = WrapPolicy{};
      read_wrap(v, p.wrap);
    } else if (k == "reshard_after_forward") {
      p.reshard_after_forward = read_reshard(v, k, flavor);
    } else if (k == "backward_prefetch") {
      std::string b = v.is_null() ? "none" : get_string(v, k);
      if (b == "none")
        p.backward_prefetch = BackwardPrefetch::none;
      else if (b == "pre")
        p.backward_prefetch = BackwardPrefetch::pre;
      else if (b == "post")
        p.backward_prefetch = BackwardPrefetch::post;
      else
        fail(k, "unknown value '" + b + "' (use none, pre or post)");
      if (p.backward_prefetch == BackwardPrefetch::post && flavor == Flavor::fsdp2)
        fail(k,
             "\"post\" (BACKWARD_POST) exists in fsdp1 only; fsdp2 prefetches before "
             "(\"pre\") or not at all (\"none\")");
    } else if (k == "forward_prefetch") {
      if (v.is_boolean())
        p.forward_prefetch = v.get<bool>() ? 1 : 0;
      else
        p.forward_prefetch = get_int(v, k, 0);
      if (flavor == Flavor::fsdp1 && p.forward_prefetch > 1)
        fail(k,
             "fsdp1 prefetches one unit ahead at most (true or false); an integer depth "
             "is fsdp2's explicit prefetch list");
    } else if (k == "limit_all_gathers") {
      bool b = get_bool(v, k);
      if (flavor == Flavor::fsdp2 && b)
        fail(k, "applies to fsdp1 only (fsdp2 has no all-gather rate limiter)");
      p.limit_all_gathers = b;
    } else if (k == "mixed_precision") {
      p.mixed_precision = MixedPrecision{};
      read_mixed_precision(v, p.mixed_precision);
    } else if (k == "cpu_offload") {
      p.cpu_offload = get_bool(v, k);
    } else if (k == "zero_grad_set_to_none") {
      p.zero_grad_set_to_none = get_bool(v, k);
    } else if (k == "activation_checkpointing") {
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
    } else if (k == "optimizer") {
      read_optimizer(v, p.optimizer);
    } else if (k == "allocator") {
      if (!v.is_object()) fail(k, "expected an object ({\"expandable_segments\": bool})");
      for (auto a = v.begin(); a != v.end(); ++a) {
        if (a.key() != "expandable_segments")
          fail("allocator." + a.key(), "unknown key (the allocator takes expandable_segments)");
        p.expandable_segments = get_bool(a.value(), "allocator.expandable_segments");
      }
    } else if (k == "grad_clip_norm") {
      if (v.is_null()) {
        p.grad_clip_norm.reset();
      } else {
        double c = get_number(v, k);
        if (c <= 0) fail(k, "must be > 0 (or null for no clipping)");
        p.grad_clip_norm = c;
      }
    } else if (k == "loss_scale") {
      if (v.is_null()) {
        p.loss_scale_mode.reset();
      } else if (v.is_string()) {
        if (v.get<std::string>() != "dynamic") fail(k, "expected null, \"dynamic\" or a number");
        p.loss_scale_mode = "dynamic";
      } else {
        double s = get_number(v, k);
        if (s <= 0) fail(k, "a fixed loss scale must be > 0");
        p.loss_scale_mode = "static";
        p.loss_scale_value = s;
      }
    } else if (k == "batch_size") {
      p.batch_size = get_int(v, k, 1);
      if (p.batch_size > kMaxBatchSize)
        fail(k, std::to_string(p.batch_size) + " exceeds the limit " +
                    std::to_string(kMaxBatchSize) +
                    " (the per-rank micro-batch; real ones are at most a few thousand)");
    } else if (k == "seq_len") {
      p.seq_len = v.is_null() ? 0 : get_int(v, k, 1);  // null: min(1024, model max)
    } else if (k == "grad_accum_steps") {
      p.grad_accum_steps = get_int(v, k, 1);
    } else if (k == "seed") {
      p.seed = get_int(v, k, 0);
    } else if (k == "overrides") {
      p.overrides = read_overrides(v, flavor);
    } else if (k == "token_balance") {
      p.token_balance = read_token_balance(v);
    } else if (k == "moe_routing") {
      const std::string r = v.is_null() ? "forced" : get_string(v, k);
      if (r == "forced")
        p.moe_routing = MoeRouting::forced;
      else if (r == "topk")
        p.moe_routing = MoeRouting::topk;
      else
        fail(k, "unknown value '" + quote_input(r) + "' (use \"forced\" or \"topk\")");
    } else {
      fail(k, "unknown key");
    }
  }
  if (p.loss_scale_mode && p.mixed_precision.param_dtype != DType::f16)
    fail("loss_scale", "applies to fp16 mixed precision only (mixed_precision.param_dtype is " +
                           std::string(mp_dtype_name(p.mixed_precision.param_dtype)) + ")");
  return p;
}

json policy_to_json(const Policy& p) {
  json j;
  j["flavor"] = flavor_name(p.flavor);
  j["world_size"] = p.world_size ? json(*p.world_size) : json(nullptr);
  j["shard_group_size"] = p.shard_group_size ? json(*p.shard_group_size) : json(nullptr);
  json w;
  w["type"] = wrap_type_name(p.wrap.type);
  w["min_num_params"] = p.wrap.min_num_params;
  if (p.wrap.type == WrapType::class_name) w["classes"] = p.wrap.classes;
  if (p.wrap.type == WrapType::modules) w["modules"] = p.wrap.modules;
  j["wrap"] = w;
  if (p.reshard_after_forward.is_int)
    j["reshard_after_forward"] = p.reshard_after_forward.k;
  else
    j["reshard_after_forward"] = p.reshard_after_forward.flag;
  j["backward_prefetch"] = backward_prefetch_name(p.backward_prefetch);
  if (p.forward_prefetch <= 1)
    j["forward_prefetch"] = p.forward_prefetch == 1;
  else
    j["forward_prefetch"] = p.forward_prefetch;
  j["limit_all_gathers"] = p.limit_all_gathers;
  json mp;
  mp["param_dtype"] = mp_dtype_name(p.mixed_precision.param_dtype);
  mp["reduce_dtype"] = mp_dtype_name(p.mixed_precision.reduce_dtype);
  mp["output_dtype"] = p.mixed_precision.output_dtype
                           ? json(mp_dtype_name(*p.mixed_precision.output_dtype))
                           : json(nullptr);
  j["mixed_precision"] = mp;
  j["cpu_offload"] = p.cpu_offload;
  switch (p.activation_checkpointing) {
    case CheckpointMode::none:
      j["activation_checkpointing"] = "none";
      break;
    case CheckpointMode::full:
      j["activation_checkpointing"] = "full";
      break;
    case CheckpointMode::every:
      j["activation_checkpointing"] = json{{"every", p.checkpoint_every}};
      // Written only when set, so that policies without it keep their JSON.
      if (p.checkpoint_offset != 0) j["activation_checkpointing"]["offset"] = p.checkpoint_offset;
      break;
    case CheckpointMode::ops:
      j["activation_checkpointing"] = op_checkpointing_to_json(p);
      break;
  }
  json o;
  o["type"] = optimizer_type_name(p.optimizer.type);
  o["lr"] = p.optimizer.lr;
  o["betas"] = {p.optimizer.beta1, p.optimizer.beta2};
  o["eps"] = p.optimizer.eps;
  o["weight_decay"] = p.optimizer.weight_decay;
  o["momentum"] = p.optimizer.momentum;
  j["optimizer"] = o;
  j["grad_clip_norm"] = p.grad_clip_norm ? json(*p.grad_clip_norm) : json(nullptr);
  j["zero_grad_set_to_none"] = p.zero_grad_set_to_none;
  j["allocator"] = {{"expandable_segments", p.expandable_segments}};
  if (!p.loss_scale_mode)
    j["loss_scale"] = nullptr;
  else if (*p.loss_scale_mode == "dynamic")
    j["loss_scale"] = "dynamic";
  else
    j["loss_scale"] = p.loss_scale_value;
  j["batch_size"] = p.batch_size;
  j["seq_len"] = p.seq_len == 0 ? json(nullptr) : json(p.seq_len);
  j["grad_accum_steps"] = p.grad_accum_steps;
  j["seed"] = p.seed;
  // Written only when set, so that policies without overrides keep their JSON.
  if (!p.overrides.empty()) {
    json list = json::array();
    for (const UnitOverride& ov : p.overrides) {
      json e;
      e["units"] = ov.pattern ? json(ov.pattern->text()) : json(ov.names);
      if (ov.reshard_after_forward) {
        if (ov.reshard_after_forward->is_int)
          e["reshard_after_forward"] = ov.reshard_after_forward->k;
        else
          e["reshard_after_forward"] = ov.reshard_after_forward->flag;
      }
      if (ov.mixed_precision)
        e["mixed_precision"] = {
            {"param_dtype", mp_dtype_name(ov.mixed_precision->param_dtype)},
            {"reduce_dtype", mp_dtype_name(ov.mixed_precision->reduce_dtype)},
            {"output_dtype", ov.mixed_precision->output_dtype
                                 ? json(mp_dtype_name(*ov.mixed_precision->output_dtype))
                                 : json(nullptr)}};
      list.push_back(std::move(e));
    }
    j["overrides"] = std::move(list);
  }
  // Mixture of experts: written only when not the default, as overrides.
  if (p.token_balance.explicit_weights) j["token_balance"] = {{"weights", p.token_balance.weights}};
  if (p.moe_routing == MoeRouting::topk) j["moe_routing"] = "topk";
  return j;
}

Policy load_policy_file(const std::string& path) {
  return policy_from_json(load_json_input(path, "policy"));
}

namespace {

// Offset of the first byte of `s` that is not part of a well-formed UTF-8
// sequence (RFC 3629: no overlong forms, surrogates or code points above
// U+10FFFF), or npos. A JSON string must be UTF-8: nlohmann's dump() throws
// on anything else, so a bare --set value is checked before it becomes one.
size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b < 0x80)
      len = 1;
    else if (b >= 0xC2 && b <= 0xDF)
      len = 2;
    else if (b == 0xE0)
      len = 3, lo = 0xA0;
    else if (b >= 0xE1 && b <= 0xEF)
      len = 3, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b == 0xF0)
      len = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3)
      len = 4;
    else if (b == 0xF4)
      len = 4, hi = 0x8F;
    else
      return i;
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

}  // namespace

void apply_set(json& doc, const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error("--set: expected KEY=VALUE, got '" + assignment + "'");
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  auto not_utf8 = [](const std::string& part, const std::string& where) {
    const size_t bad = invalid_utf8_at(part);
    if (bad == std::string_view::npos) return;
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(part[bad]));
    throw Error(where + " is not valid UTF-8 (byte " + byte + " at offset " + std::to_string(bad) +
                ")");
  };
  not_utf8(key, "--set: the key");
  not_utf8(text, "--set " + quote_input(key) + ": the value");
  json value;
  if (std::optional<json> parsed = try_parse_json_input(text, "--set " + quote_input(key)))
    value = std::move(*parsed);
  else
    value = text;  // bare string: --set wrap.type=class
  if (!doc.is_object()) doc = json::object();
  json* node = &doc;
  std::stringstream ss(key);
  std::string part;
  std::vector<std::string> parts;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty()) throw Error("--set: empty key segment in '" + key + "'");
    if (i + 1 == parts.size()) {
      (*node)[parts[i]] = value;
    } else {
      json& child = (*node)[parts[i]];
      if (!child.is_object()) {
        // A string shorthand ("optimizer": "sgd") becomes its object form.
        json replacement = json::object();
        if (child.is_string()) replacement["type"] = child;
        child = replacement;
      }
      node = &child;
    }
  }
}

int64_t resolve_seq_len(const Policy& policy, const Graph& graph) {
  if (policy.seq_len > 0) return policy.seq_len;
  return std::min<int64_t>(1024, graph.max_seq_len);
}

std::shared_ptr<const TokenBalance> stated_token_balance(const Policy& policy) {
  if (!policy.token_balance.explicit_weights) return nullptr;
  // Cumulative shares in units of 1/kShareScale: each prefix sum rounded, the
  // last exactly 1, so the experts' counts always sum to T*k (plan/expr.h).
  auto b = std::make_shared<TokenBalance>();
  b->mode = TokenBalance::Mode::weights;
  const std::vector<double>& w = policy.token_balance.weights;
  b->cumulative.push_back(0);
  double prefix = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    prefix += w[i];
    const int64_t c =
        i + 1 == w.size()
            ? TokenBalance::kShareScale
            : std::llround(std::min(prefix, 1.0) * static_cast<double>(TokenBalance::kShareScale));
    b->cumulative.push_back(std::max(c, b->cumulative.back()));
  }
  return b;
}

Workload policy_workload(const Policy& policy, const Graph& graph) {
  Workload w{policy.batch_size, resolve_seq_len(policy, graph)};
  if (policy.moe_routing == MoeRouting::topk) {
    auto all = std::make_shared<TokenBalance>();
    all->mode = TokenBalance::Mode::all_tokens;
    w.balance = std::move(all);
  } else {
    w.balance = stated_token_balance(policy);
  }
  return w;
}

int64_t estimated_schedule_ops(const Policy& policy, const Graph& graph) {
  int64_t ops = 0;
  const int64_t per_micro = 4 * std::max<int64_t>(1, static_cast<int64_t>(graph.ops.size()));
  if (__builtin_mul_overflow(policy.grad_accum_steps, per_micro, &ops)) return INT64_MAX;
  return ops;
}

namespace {

// token_balance and moe_routing against the model's routed layers: a model
// without them takes neither (a knob that does not apply is an error); the
// weights are one per expert, and none routes a token to one expert twice.
void validate_moe(const Policy& p, const Graph& graph) {
  const bool set = p.token_balance.explicit_weights || p.moe_routing != MoeRouting::forced;
  const std::shared_ptr<const TokenBalance> stated = stated_token_balance(p);
  bool routed = false;
  for (const Op& op : graph.ops) {
    if (op.type != OpType::moe_router) continue;
    routed = true;
    if (!stated) continue;
    const int64_t experts = op.attrs.num_experts.value_or(0), k = op.attrs.top_k.value_or(1);
    const std::vector<double>& w = p.token_balance.weights;
    if (static_cast<int64_t>(w.size()) != experts)
      fail("token_balance.weights", std::to_string(w.size()) + " weights, but the model's layer '" +
                                        op.name + "' has " + std::to_string(experts) + " experts");
    for (size_t e = 0; e < w.size(); ++e) {
      const int64_t share = stated->cumulative[e + 1] - stated->cumulative[e];
      if (share * k > TokenBalance::kShareScale)
        fail("token_balance.weights[" + std::to_string(e) + "]",
             "a share above 1/top_k (top_k " + std::to_string(k) +
                 ") would send a token to expert " + std::to_string(e) +
                 " more than once; top-k picks k distinct experts");
    }
  }
  if (set && !routed)
    fail(p.token_balance.explicit_weights ? "token_balance" : "moe_routing",
         "applies to mixture-of-experts models only; model '" + graph.model_name +
             "' has no routed layers");
}

}  // namespace

World validate_policy(const Policy& p, const Graph& graph, int64_t world_size) {
  if (world_size < 1) fail("world_size", "must be >= 1");
  if (p.world_size && *p.world_size != world_size)
    fail("world_size", "the policy says " + std::to_string(*p.world_size) + " but the run has " +
                           std::to_string(world_size) + " ranks");
  World w;
  w.world_size = world_size;
  w.shard_group_size = p.shard_group_size.value_or(world_size);
  if (w.shard_group_size > world_size || world_size % w.shard_group_size != 0)
    fail("shard_group_size", std::to_string(w.shard_group_size) + " does not divide world_size " +
                                 std::to_string(world_size));
  w.replicas = world_size / w.shard_group_size;
  if (p.reshard_after_forward.is_int) {
    int64_t k = p.reshard_after_forward.k;
    if (k < 1 || w.shard_group_size % k != 0)
      fail("reshard_after_forward", std::to_string(k) + " does not divide the shard group size " +
                                        std::to_string(w.shard_group_size));
  }
  for (size_t i = 0; i < p.overrides.size(); ++i) {
    const UnitOverride& o = p.overrides[i];
    const std::string at = "overrides[" + std::to_string(i) + "]";
    if (o.reshard_after_forward && o.reshard_after_forward->is_int &&
        w.shard_group_size % o.reshard_after_forward->k != 0)
      fail(at + ".reshard_after_forward", std::to_string(o.reshard_after_forward->k) +
                                              " does not divide the shard group size " +
                                              std::to_string(w.shard_group_size));
    if (o.mixed_precision && o.mixed_precision->output_dtype)
      fail(at + ".mixed_precision.output_dtype",
           "casting forward outputs is not modelled yet; leave it null (PyTorch's default)");
  }
  if (p.flavor == Flavor::fsdp2 && p.limit_all_gathers)
    fail("limit_all_gathers", "applies to fsdp1 only");
  if (p.flavor == Flavor::fsdp2 && p.backward_prefetch == BackwardPrefetch::post)
    fail("backward_prefetch", "\"post\" exists in fsdp1 only");
  int64_t seq = resolve_seq_len(p, graph);
  if (seq > graph.max_seq_len)
    fail("seq_len", std::to_string(seq) + " exceeds the model's maximum of " +
                        std::to_string(graph.max_seq_len));
  // Before any size is evaluated: B x T bounds every activation's elements.
  // Both factors are positive and below 2^63; the product is checked.
  int64_t tokens = 0;
  if (__builtin_mul_overflow(p.batch_size, seq, &tokens) || tokens > kMaxTokensPerMicroStep)
    fail("batch_size", "batch_size " + std::to_string(p.batch_size) + " x seq_len " +
                           std::to_string(seq) + " tokens per micro-step exceeds the limit " +
                           std::to_string(kMaxTokensPerMicroStep) +
                           " (2^32: activation element counts, tokens x vocabulary, must fit "
                           "int64; real micro-steps are at most about a million tokens)");
  // Counted before anything is built: a schedule of 2e9 micro-steps would
  // exhaust memory (std::bad_alloc) after minutes instead of being refused.
  const int64_t ops = estimated_schedule_ops(p, graph);
  if (ops > kMaxScheduleOps) {
    const int64_t per_micro = estimated_schedule_ops(default_policy(p.flavor), graph);
    const int64_t allowed = kMaxScheduleOps / per_micro;
    char what[400];
    std::snprintf(what, sizeof what,
                  "%lld micro-steps would make a step schedule of about %.1e ops (%lld graph ops "
                  "x 4 per micro-step), over the limit of %.0e ops (about 600 bytes each to plan "
                  "and simulate); %s%lld",
                  static_cast<long long>(p.grad_accum_steps), static_cast<double>(ops),
                  static_cast<long long>(per_micro / 4), static_cast<double>(kMaxScheduleOps),
                  allowed > 0 ? "this model allows at most "
                              : "this model's graph is too large for even one micro-step: graph "
                                "ops at most ",
                  static_cast<long long>(allowed > 0 ? allowed : kMaxScheduleOps / 4));
    fail("grad_accum_steps", what);
  }
  if (p.loss_scale_mode && p.mixed_precision.param_dtype != DType::f16)
    fail("loss_scale", "applies to fp16 mixed precision only");
  validate_moe(p, graph);
  // Casting each unit's forward outputs changes activation sizes unit by unit;
  // the schedule does not model it yet, so refuse rather than ignore it.
  if (p.mixed_precision.output_dtype)
    fail("mixed_precision.output_dtype",
         "casting forward outputs is not modelled yet; leave it null (PyTorch's default)");
  return w;
}

std::string UnitOverride::units_text() const {
  return quote_input(pattern ? json(pattern->text()).dump() : json(names).dump());
}

int64_t reshard_degree(const Policy& policy, const World& world) {
  const ReshardAfterForward& r = policy.reshard_after_forward;
  if (r.is_int) return r.k;
  return r.flag ? world.shard_group_size : 1;
}

}  // namespace shardscope::plan
