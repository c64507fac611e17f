#include "plan/policy_keys.h"

#include <cstdio>
#include <cstring>
#include <type_traits>

#include "plan/error.h"
#include "plan/json_input.h"
#include "plan/policy_values.h"
#include "plan/vocab_padding.h"

namespace shardscope::plan {

using nlohmann::json;
using namespace policy_values;

namespace {

// --- the keys' own checks against the model and world (validate_policy) ---

void check_reshard(const Policy& p, const Graph&, const World& w) {
  if (!p.reshard_after_forward.is_int) return;
  const int64_t k = p.reshard_after_forward.k;
  if (k < 1 || w.shard_group_size % k != 0)
    fail("reshard_after_forward", std::to_string(k) + " does not divide the shard group size " +
                                      std::to_string(w.shard_group_size));
}

void check_overrides(const Policy& p, const Graph&, const World& w) {
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
}

void check_limit_all_gathers(const Policy& p, const Graph&, const World&) {
  if (p.flavor == Flavor::fsdp2 && p.limit_all_gathers)
    fail("limit_all_gathers", "applies to fsdp1 only");
}

void check_backward_prefetch(const Policy& p, const Graph&, const World&) {
  if (p.flavor == Flavor::fsdp2 && p.backward_prefetch == BackwardPrefetch::post)
    fail("backward_prefetch", "\"post\" exists in fsdp1 only");
}

void check_seq_len(const Policy& p, const Graph& graph, const World&) {
  const int64_t seq = resolve_seq_len(p, graph);
  if (seq > graph.max_seq_len)
    fail("seq_len", std::to_string(seq) + " exceeds the model's maximum of " +
                        std::to_string(graph.max_seq_len));
}

// The graph must be padded as the policy says (pad_vocabulary before planning:
// cli/plan_inputs.cpp); a graph padded already (graph JSON) plans with 1.
void check_vocab_pad_to(const Policy& p, const Graph& graph, const World&) {
  if (p.vocab_pad_to == 1) return;
  const VocabPadding vp = vocab_padding(graph);
  const int64_t want = padded_vocab(vp.valid, p.vocab_pad_to);
  if (vp.valid == 0 || vp.padded != want)
    fail("vocab_pad_to", std::to_string(p.vocab_pad_to) + ": graph '" + graph.model_name +
                             "' has " + std::to_string(vp.padded) + " logit columns, not " +
                             std::to_string(want) +
                             " (plan::pad_vocabulary pads it before planning)");
}

// Before any size is evaluated: B x T bounds every activation's elements.
// Both factors are positive and below 2^63; the product is checked.
void check_batch_size(const Policy& p, const Graph& graph, const World&) {
  const int64_t seq = resolve_seq_len(p, graph);
  int64_t tokens = 0;
  if (__builtin_mul_overflow(p.batch_size, seq, &tokens) || tokens > kMaxTokensPerMicroStep)
    fail("batch_size", "batch_size " + std::to_string(p.batch_size) + " x seq_len " +
                           std::to_string(seq) + " tokens per micro-step exceeds the limit " +
                           std::to_string(kMaxTokensPerMicroStep) +
                           " (2^32: activation element counts, tokens x vocabulary, must fit "
                           "int64; real micro-steps are at most about a million tokens)");
}

// Counted before anything is built: a schedule of 2e9 micro-steps would
// exhaust memory (std::bad_alloc) after minutes instead of being refused.
void check_grad_accum_steps(const Policy& p, const Graph& graph, const World&) {
  const int64_t ops = estimated_schedule_ops(p, graph);
  if (ops <= kMaxScheduleOps) return;
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

void check_loss_scale(const Policy& p, const Graph&, const World&) {
  if (p.loss_scale_mode && p.mixed_precision.param_dtype != DType::f16)
    fail("loss_scale", "applies to fp16 mixed precision only");
}

// Casting each unit's forward outputs changes activation sizes unit by unit;
// the schedule does not model it yet, so refuse rather than ignore it.
void check_mixed_precision(const Policy& p, const Graph&, const World&) {
  if (p.mixed_precision.output_dtype)
    fail("mixed_precision.output_dtype",
         "casting forward outputs is not modelled yet; leave it null (PyTorch's default)");
}

// --- readers that are not a single value reader of policy_values.h ---

void read_backward_prefetch(const json& v, const std::string& k, Policy& p) {
  const std::string b = v.is_null() ? "none" : get_string(v, k);
  if (b == "none")
    p.backward_prefetch = BackwardPrefetch::none;
  else if (b == "pre")
    p.backward_prefetch = BackwardPrefetch::pre;
  else if (b == "post")
    p.backward_prefetch = BackwardPrefetch::post;
  else
    fail(k, "unknown value '" + b + "' (use none, pre or post)");
  if (p.backward_prefetch == BackwardPrefetch::post && p.flavor == Flavor::fsdp2)
    fail(k,
         "\"post\" (BACKWARD_POST) exists in fsdp1 only; fsdp2 prefetches before "
         "(\"pre\") or not at all (\"none\")");
}

void read_forward_prefetch(const json& v, const std::string& k, Policy& p) {
  p.forward_prefetch = v.is_boolean() ? (v.get<bool>() ? 1 : 0) : get_int(v, k, 0);
  if (p.flavor == Flavor::fsdp1 && p.forward_prefetch > 1)
    fail(k,
         "fsdp1 prefetches one unit ahead at most (true or false); an integer depth "
         "is fsdp2's explicit prefetch list");
}

void read_grad_clip_norm(const json& v, const std::string& k, Policy& p) {
  if (v.is_null()) {
    p.grad_clip_norm.reset();
    return;
  }
  const double c = get_number(v, k);
  if (c <= 0) fail(k, "must be > 0 (or null for no clipping)");
  p.grad_clip_norm = c;
}

void read_loss_scale(const json& v, const std::string& k, Policy& p) {
  if (v.is_null()) {
    p.loss_scale_mode.reset();
  } else if (v.is_string()) {
    if (v.get<std::string>() != "dynamic") fail(k, "expected null, \"dynamic\" or a number");
    p.loss_scale_mode = "dynamic";
  } else {
    const double s = get_number(v, k);
    if (s <= 0) fail(k, "a fixed loss scale must be > 0");
    p.loss_scale_mode = "static";
    p.loss_scale_value = s;
  }
}

json loss_scale_to_json(const Policy& p) {
  if (!p.loss_scale_mode) return nullptr;
  if (*p.loss_scale_mode == "dynamic") return "dynamic";
  return p.loss_scale_value;
}

void read_batch_size(const json& v, const std::string& k, Policy& p) {
  p.batch_size = get_int(v, k, 1);
  if (p.batch_size > kMaxBatchSize)
    fail(k, std::to_string(p.batch_size) + " exceeds the limit " + std::to_string(kMaxBatchSize) +
                " (the per-rank micro-batch; real ones are at most a few thousand)");
}

void read_moe_routing(const json& v, const std::string& k, Policy& p) {
  const std::string r = v.is_null() ? "forced" : get_string(v, k);
  if (r == "forced")
    p.moe_routing = MoeRouting::forced;
  else if (r == "topk")
    p.moe_routing = MoeRouting::topk;
  else
    fail(k, "unknown value '" + quote_input(r) + "' (use \"forced\" or \"topk\")");
}

// attention: {"sdpa_backend": "auto" | "flash" | "efficient" | "cudnn" | "math"}.
void read_attention(const json& v, const std::string& k, Policy& p) {
  if (!v.is_object())
    fail(k, "expected an object {\"sdpa_backend\": ...}, got " + std::string(v.type_name()));
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() != "sdpa_backend")
      fail(k + "." + it.key(), "unknown key (attention takes sdpa_backend)");
    const std::string name = get_string(it.value(), k + ".sdpa_backend");
    try {
      p.sdpa_backend = parse_sdpa_backend(name, k + ".sdpa_backend");
    } catch (const Error&) {
      fail(k + ".sdpa_backend", "unknown value \"" + quote_input(name) +
                                    "\" (use auto, flash, efficient, cudnn or math)");
    }
  }
}

std::optional<int64_t> optional_int(const json& v, const std::string& k, int64_t lo) {
  if (v.is_null()) return std::nullopt;
  return get_int(v, k, lo);
}

json optional_to_json(const std::optional<int64_t>& x) {
  return x ? json(*x) : json(nullptr);
}

using ReadFn = void (*)(const json&, const std::string&, Policy&);
using WriteFn = void (*)(const Policy&, json&);
using CheckFn = void (*)(const Policy&, const Graph&, const World&);

std::vector<PolicyKey> make_policy_keys() {
  std::vector<PolicyKey> keys;
  auto add = [&keys](const char* name, ReadFn read, WriteFn write,
                     CheckFn check = nullptr) -> PolicyKey& {
    PolicyKey k;
    k.name = name;
    k.read = read;
    k.write = write;
    k.check = check;
    keys.push_back(k);
    return keys.back();
  };
  // The flavor is read first (policy_from_json), for its defaults.
  add(
      "flavor", [](const json&, const std::string&, Policy&) {},
      [](const Policy& p, json& d) { d["flavor"] = flavor_name(p.flavor); });
  PolicyKey& world = add(
      "world_size",
      [](const json& v, const std::string& k, Policy& p) { p.world_size = optional_int(v, k, 1); },
      [](const Policy& p, json& d) { d["world_size"] = optional_to_json(p.world_size); });
  world.sweepable = false;
  world.sweep_note = "give the worlds with --world N[,N...]";
  add(
      "shard_group_size",
      [](const json& v, const std::string& k, Policy& p) {
        p.shard_group_size = optional_int(v, k, 1);
      },
      [](const Policy& p, json& d) {
        d["shard_group_size"] = optional_to_json(p.shard_group_size);
      });
  add(
      "wrap",
      [](const json& v, const std::string&, Policy& p) {
        p.wrap = WrapPolicy{};
        read_wrap(v, p.wrap);
      },
      [](const Policy& p, json& d) { d["wrap"] = wrap_to_json(p.wrap); });
  add(
      "reshard_after_forward",
      [](const json& v, const std::string& k, Policy& p) {
        p.reshard_after_forward = read_reshard(v, k, p.flavor);
      },
      [](const Policy& p, json& d) {
        d["reshard_after_forward"] = reshard_to_json(p.reshard_after_forward);
      },
      check_reshard);
  add(
      "overrides",
      [](const json& v, const std::string&, Policy& p) {
        p.overrides = read_overrides(v, p.flavor);
      },
      [](const Policy& p, json& d) {
        // Written only when set, so that policies without overrides keep their JSON.
        if (!p.overrides.empty()) d["overrides"] = overrides_to_json(p.overrides);
      },
      check_overrides);
  PolicyKey& limit = add(
      "limit_all_gathers",
      [](const json& v, const std::string& k, Policy& p) { p.limit_all_gathers = get_bool(v, k); },
      [](const Policy& p, json& d) { d["limit_all_gathers"] = p.limit_all_gathers; },
      check_limit_all_gathers);
  limit.fsdp2 = false;
  limit.flavor_note = "fsdp2 has no all-gather rate limiter";
  add(
      "backward_prefetch", read_backward_prefetch,
      [](const Policy& p, json& d) {
        d["backward_prefetch"] = backward_prefetch_name(p.backward_prefetch);
      },
      check_backward_prefetch);
  add("forward_prefetch", read_forward_prefetch, [](const Policy& p, json& d) {
    d["forward_prefetch"] =
        p.forward_prefetch <= 1 ? json(p.forward_prefetch == 1) : json(p.forward_prefetch);
  });
  add(
      "seq_len",
      [](const json& v, const std::string& k, Policy& p) {
        p.seq_len = v.is_null() ? 0 : get_int(v, k, 1);  // null: min(1024, model max)
      },
      [](const Policy& p, json& d) {
        d["seq_len"] = p.seq_len == 0 ? json(nullptr) : json(p.seq_len);
      },
      check_seq_len);
  add(
      "batch_size", read_batch_size,
      [](const Policy& p, json& d) { d["batch_size"] = p.batch_size; }, check_batch_size);
  add(
      "grad_accum_steps",
      [](const json& v, const std::string& k, Policy& p) { p.grad_accum_steps = get_int(v, k, 1); },
      [](const Policy& p, json& d) { d["grad_accum_steps"] = p.grad_accum_steps; },
      check_grad_accum_steps);
  add(
      "loss_scale", read_loss_scale,
      [](const Policy& p, json& d) { d["loss_scale"] = loss_scale_to_json(p); }, check_loss_scale);
  add(
      "mixed_precision",
      [](const json& v, const std::string&, Policy& p) {
        p.mixed_precision = MixedPrecision{};
        read_mixed_precision(v, p.mixed_precision);
      },
      [](const Policy& p, json& d) {
        d["mixed_precision"] = mixed_precision_to_json(p.mixed_precision);
      },
      check_mixed_precision);
  add(
      "cpu_offload",
      [](const json& v, const std::string& k, Policy& p) { p.cpu_offload = get_bool(v, k); },
      [](const Policy& p, json& d) { d["cpu_offload"] = p.cpu_offload; });
  add(
      "zero_grad_set_to_none",
      [](const json& v, const std::string& k, Policy& p) {
        p.zero_grad_set_to_none = get_bool(v, k);
      },
      [](const Policy& p, json& d) { d["zero_grad_set_to_none"] = p.zero_grad_set_to_none; });
  add("activation_checkpointing", read_activation_checkpointing, [](const Policy& p, json& d) {
    d["activation_checkpointing"] = activation_checkpointing_to_json(p);
  });
  add(
      "optimizer",
      [](const json& v, const std::string&, Policy& p) { read_optimizer(v, p.optimizer); },
      [](const Policy& p, json& d) { d["optimizer"] = optimizer_to_json(p.optimizer); });
  add("grad_clip_norm", read_grad_clip_norm, [](const Policy& p, json& d) {
    d["grad_clip_norm"] = p.grad_clip_norm ? json(*p.grad_clip_norm) : json(nullptr);
  });
  add(
      "seed", [](const json& v, const std::string& k, Policy& p) { p.seed = get_int(v, k, 0); },
      [](const Policy& p, json& d) { d["seed"] = p.seed; });
  // Mixture of experts: written only when not the default, as overrides;
  // checked against the model's routed layers by validate_policy (both keys
  // at once: validate_moe, a cross-key check).
  add(
      "token_balance",
      [](const json& v, const std::string&, Policy& p) { p.token_balance = read_token_balance(v); },
      [](const Policy& p, json& d) {
        if (p.token_balance.explicit_weights)
          d["token_balance"] = {{"weights", p.token_balance.weights}};
      });
  add("moe_routing", read_moe_routing, [](const Policy& p, json& d) {
    if (p.moe_routing == MoeRouting::topk) d["moe_routing"] = "topk";
  });
  // PyTorch's PYTORCH_CUDA_ALLOC_CONF (alloc/, docs/allocator.md).
  add(
      "allocator",
      [](const json& v, const std::string& k, Policy& p) {
        if (!v.is_object()) fail(k, "expected an object ({\"expandable_segments\": bool})");
        for (auto a = v.begin(); a != v.end(); ++a) {
          if (a.key() != "expandable_segments")
            fail(k + "." + a.key(), "unknown key (the allocator takes expandable_segments)");
          p.expandable_segments = get_bool(a.value(), k + ".expandable_segments");
        }
      },
      [](const Policy& p, json& d) {
        d["allocator"] = {{"expandable_segments", p.expandable_segments}};
      });
  // Written only when it pads (1 is no padding), so that other policies keep their JSON.
  PolicyKey& pad = add(
      "vocab_pad_to",
      [](const json& v, const std::string& k, Policy& p) {
        p.vocab_pad_to = v.is_null() ? 1 : get_int(v, k, 1);
        if (p.vocab_pad_to > kMaxVocabPadTo)
          fail(k, std::to_string(p.vocab_pad_to) + " exceeds the limit " +
                      std::to_string(kMaxVocabPadTo) +
                      " (1: no padding; llm.c pads GPT-2's vocabulary to a multiple of 128)");
      },
      [](const Policy& p, json& d) {
        if (p.vocab_pad_to != 1) d["vocab_pad_to"] = p.vocab_pad_to;
      },
      check_vocab_pad_to);
  pad.sweepable = false;
  pad.sweep_note =
      "the model is padded once per sweep: give vocab_pad_to with --policy or --set, not in the "
      "grid";
  // Written only when a backend is forced (torch.nn.attention.sdpa_kernel).
  add("attention", read_attention, [](const Policy& p, json& d) {
    if (p.sdpa_backend != SdpaBackend::automatic)
      d["attention"] = {{"sdpa_backend", sdpa_backend_name(p.sdpa_backend)}};
  });
  return keys;
}

// --- overrides ---

using OverrideReadFn = void (*)(const json&, const std::string&, Flavor, UnitOverride&);
using OverrideWriteFn = void (*)(const UnitOverride&, json&);

std::vector<OverrideKey> make_override_keys() {
  std::vector<OverrideKey> keys;
  auto add = [&keys](const char* name, OverrideReadFn read, OverrideWriteFn write) {
    OverrideKey k;
    k.name = name;
    k.read = read;
    k.write = write;
    keys.push_back(k);
    return &keys.back();
  };
  add(
      "units",
      [](const json& x, const std::string& key, Flavor, UnitOverride& ov) {
        if (x.is_string()) {
          ov.pattern = std::make_shared<const UnitPattern>(x.get<std::string>(), "policy: " + key);
        } else if (x.is_array()) {
          ov.names = get_string_list(x, key);
          if (ov.names.empty()) fail(key, "an empty list names no unit");
        } else {
          fail(key,
               "expected a regex string or a list of unit names, got " + quote_input(x.dump()));
        }
      },
      [](const UnitOverride& ov, json& e) {
        e["units"] = ov.pattern ? json(ov.pattern->text()) : json(ov.names);
      });
  add(
      "reshard_after_forward",
      [](const json& x, const std::string& key, Flavor flavor, UnitOverride& ov) {
        ov.reshard_after_forward = read_reshard(x, key, flavor);
      },
      [](const UnitOverride& ov, json& e) {
        if (ov.reshard_after_forward)
          e["reshard_after_forward"] = reshard_to_json(*ov.reshard_after_forward);
      });
  add(
      "mixed_precision",
      [](const json& x, const std::string& key, Flavor, UnitOverride& ov) {
        if (!x.is_object())
          fail(key, "expected an object (param_dtype, reduce_dtype, output_dtype)");
        MixedPrecision mp;
        try {
          read_mixed_precision(x, mp);
        } catch (const Error& e) {
          // "policy: mixed_precision.X: ..." -> "policy: overrides[i].mixed_precision.X: ..."
          const std::string prefix = "policy: ", msg = e.what();
          const std::string at = key.substr(0, key.size() - std::strlen(".mixed_precision"));
          throw Error(prefix + at + "." + msg.substr(prefix.size()));
        }
        ov.mixed_precision = mp;
      },
      [](const UnitOverride& ov, json& e) {
        if (ov.mixed_precision) e["mixed_precision"] = mixed_precision_to_json(*ov.mixed_precision);
      });
  OverrideKey* offload = add(
      "cpu_offload",
      [](const json&, const std::string& key, Flavor, UnitOverride&) {
        fail(key,
             "per-unit CPU offload is not modelled (the optimizer step would run partly on the "
             "host); set the policy's cpu_offload for every unit");
      },
      nullptr);
  offload->refused = true;
  return keys;
}

template <typename Rows>
std::string names_of(const Rows& rows) {
  std::string out;
  for (const auto& r : rows) {
    if constexpr (std::is_same_v<typename Rows::value_type, OverrideKey>)
      if (r.refused) continue;
    out += (out.empty() ? "" : ", ") + std::string(r.name);
  }
  return out;
}

}  // namespace

const std::vector<PolicyKey>& policy_keys() {
  static const std::vector<PolicyKey> keys = make_policy_keys();
  return keys;
}

const PolicyKey* find_policy_key(std::string_view name) {
  for (const PolicyKey& k : policy_keys())
    if (name == k.name) return &k;
  return nullptr;
}

const std::vector<OverrideKey>& override_keys() {
  static const std::vector<OverrideKey> keys = make_override_keys();
  return keys;
}

std::string policy_key_names() {
  return names_of(policy_keys());
}

std::string override_key_names() {
  return names_of(override_keys());
}

}  // namespace shardscope::plan
