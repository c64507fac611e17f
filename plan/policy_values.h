// The value readers and writers of the policy keys (plan/policy_keys.cpp's
// rows use them). Internal to plan/: every reader is strict, and its errors
// are plan::Error "policy: KEY: what", naming the key as written (dotted for
// nested keys, indexed for list elements).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/policy.h"

namespace shardscope::plan::policy_values {

[[noreturn]] void fail(const std::string& key, const std::string& what);

bool get_bool(const nlohmann::json& v, const std::string& key);
// An integer >= lo (and <= INT64_MAX).
int64_t get_int(const nlohmann::json& v, const std::string& key, int64_t lo);
// A finite number.
double get_number(const nlohmann::json& v, const std::string& key);
std::string get_string(const nlohmann::json& v, const std::string& key);
std::vector<std::string> get_string_list(const nlohmann::json& v, const std::string& key);
// "fp32" | "float32" | "bf16" | "bfloat16" | "fp16" | "float16".
DType get_float_dtype(const nlohmann::json& v, const std::string& key);
// The name a policy writes for a floating dtype: "fp32", "bf16", "fp16".
const char* mp_dtype_name(DType d);

void read_wrap(const nlohmann::json& v, WrapPolicy& w);
nlohmann::json wrap_to_json(const WrapPolicy& w);

// null resets to the defaults; reduce_dtype left out (or null) reduces in
// param_dtype, as PyTorch does.
void read_mixed_precision(const nlohmann::json& v, MixedPrecision& mp);
nlohmann::json mixed_precision_to_json(const MixedPrecision& mp);

// true | false | k (fsdp2 only).
ReshardAfterForward read_reshard(const nlohmann::json& v, const std::string& key, Flavor flavor);
nlohmann::json reshard_to_json(const ReshardAfterForward& r);

// "none" | "full" | {"every": k, "offset": o} | the per-op form
// (plan/op_checkpointing.h), into p's checkpointing fields.
void read_activation_checkpointing(const nlohmann::json& v, const std::string& key, Policy& p);
nlohmann::json activation_checkpointing_to_json(const Policy& p);

// "adamw" | "sgd" | {"type": ..., "lr": ..., ...}.
void read_optimizer(const nlohmann::json& v, OptimizerConfig& o);
nlohmann::json optimizer_to_json(const OptimizerConfig& o);

// The `overrides` list; each entry's keys come from override_keys()
// (plan/policy_keys.h).
std::vector<UnitOverride> read_overrides(const nlohmann::json& v, Flavor flavor);
nlohmann::json overrides_to_json(const std::vector<UnitOverride>& overrides);

// "uniform" | {"weights": [w_0, ..., w_{E-1}]}.
TokenBalanceSpec read_token_balance(const nlohmann::json& v);

}  // namespace shardscope::plan::policy_values
