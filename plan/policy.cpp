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
#include <tuple>
#include <utility>
#include <vector>

#include "plan/error.h"
#include "plan/json_input.h"
#include "plan/policy_keys.h"
#include "plan/policy_values.h"

namespace shardscope::plan {

using nlohmann::json;
using policy_values::fail;
using policy_values::get_string;
using policy_values::mp_dtype_name;

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
  const Policy defaults = p;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const PolicyKey* row = find_policy_key(it.key());
    if (!row) fail(it.key(), "unknown key (a policy takes " + policy_key_names() + ")");
    row->read(*it, it.key(), p);
    // A key the flavor lacks may only state that flavor's default.
    const bool applies = flavor == Flavor::fsdp1 ? row->fsdp1 : row->fsdp2;
    if (!applies) {
      json value, default_value;
      row->write(p, value);
      row->write(defaults, default_value);
      if (value != default_value)
        fail(it.key(), std::string("applies to ") + (row->fsdp1 ? "fsdp1" : "fsdp2") + " only (" +
                           row->flavor_note + ")");
    }
  }
  if (p.loss_scale_mode && p.mixed_precision.param_dtype != DType::f16)
    fail("loss_scale", "applies to fp16 mixed precision only (mixed_precision.param_dtype is " +
                           std::string(mp_dtype_name(p.mixed_precision.param_dtype)) + ")");
  return p;
}

json policy_to_json(const Policy& p) {
  json j = json::object();
  for (const PolicyKey& row : policy_keys()) row.write(p, j);
  return j;
}

Policy load_policy_file(const std::string& path) {
  return policy_from_json(load_json_input(path, "policy"));
}

int64_t resolve_seq_len(const Policy& policy, const Graph& graph) {
  if (policy.seq_len > 0) return policy.seq_len;
  return std::min<int64_t>(1024, graph.max_seq_len);
}

int64_t tokens_per_step(const Policy& policy, const Graph& graph, int64_t world) {
  const int64_t seq = graph.vocab_size > 0 ? resolve_seq_len(policy, graph) : 1;
  int64_t tokens = world;
  for (int64_t factor : {policy.batch_size, seq, policy.grad_accum_steps})
    if (__builtin_mul_overflow(tokens, factor, &tokens))
      throw Error("tokens per step (world " + std::to_string(world) + " x batch_size " +
                  std::to_string(policy.batch_size) + " x seq_len " + std::to_string(seq) +
                  " x grad_accum_steps " + std::to_string(policy.grad_accum_steps) +
                  ") overflow int64");
  return tokens;
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
  // (name, E, k) of each routed layer: the native builders' moe_router ops, and in
  // exported graphs (docs/export.md) each distinct (E, k) of a routed(e,E,k) factor in a
  // tensor's shape, named by the first such tensor.
  std::vector<std::tuple<std::string, int64_t, int64_t>> layers;
  for (const Op& op : graph.ops)
    if (op.type == OpType::moe_router)
      layers.emplace_back(op.name, op.attrs.num_experts.value_or(0), op.attrs.top_k.value_or(1));
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const Tensor& t : graph.tensors)
    for (const Poly& dim : t.shape)
      for (const auto& [key, c] : dim.routed_terms())
        if (seen.emplace(std::get<3>(key), std::get<4>(key)).second)
          layers.emplace_back(t.name, std::get<3>(key), std::get<4>(key));
  const bool routed = !layers.empty();
  for (const auto& [name, experts, k] : layers) {
    if (!stated) continue;
    const std::vector<double>& w = p.token_balance.weights;
    if (static_cast<int64_t>(w.size()) != experts)
      fail("token_balance.weights", std::to_string(w.size()) + " weights, but the model's layer '" +
                                        name + "' has " + std::to_string(experts) + " experts");
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
  // Each key's own check, in the table's order, then the checks across keys.
  for (const PolicyKey& row : policy_keys())
    if (row.check) row.check(p, graph, w);
  validate_moe(p, graph);
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
