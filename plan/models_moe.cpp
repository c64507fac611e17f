// Mixture of experts: Mixtral and Qwen2-MoE (Hugging Face MixtralForCausalLM,
// Qwen2MoeForCausalLM, transformers 4.57), module for module
// (P = "Mixtral" or "Qwen2Moe"):
//   ""                            PForCausalLM
//   model                         PModel
//   model.embed_tokens            Embedding [V, C]
//   model.layers.<i>              PDecoderLayer: input_layernorm PRMSNorm, self_attn
//                                 PAttention (q_proj C->H*D, k_proj and v_proj
//                                 C->Hkv*D, o_proj H*D->C; Qwen2-MoE: bias on
//                                 q/k/v with qkv_bias), post_attention_layernorm
//                                 PRMSNorm, then the layer's MLP:
//     Mixtral:   block_sparse_moe MixtralSparseMoeBlock: gate Linear C->E (no
//                bias), experts ModuleList of E MixtralBlockSparseTop2MLP
//                (w1, w3 C->F, w2 F->C, no bias; act(w1 x) * w3 x)
//     Qwen2-MoE: mlp Qwen2MoeSparseMoeBlock: gate Linear C->E, experts
//                ModuleList of E Qwen2MoeMLP (gate_proj, up_proj C->Fe,
//                down_proj Fe->C; Fe = moe_intermediate_size), shared_expert
//                Qwen2MoeMLP (Fs = shared_expert_intermediate_size),
//                shared_expert_gate Linear C->1; or, on the layers
//                decoder_sparse_step and mlp_only_layers leave dense, mlp
//                Qwen2MoeMLP of intermediate_size
//   model.norm                    PRMSNorm
//   lm_head                       Linear C->V (tied when tie_word_embeddings)
// A routed layer's ops: gate (linear), router (moe_router: softmax, top-k,
// Mixtral's renormalisation or Qwen2-MoE's norm_topk_prob), then per expert
// dispatch (moe_dispatch: its rows B*routed(e,E,k), plan/expr.h), its two
// input projections, swiglu and output projection, then combine
// (moe_combine); Qwen2-MoE adds the shared expert's MLP, its gate (linear,
// sigmoid_gate) and the sum of both (residual "shared_add"). How many tokens
// each expert gets is the policy's token_balance (docs/policy.md); the
// parameters (all experts) are the same whatever it is.
// Refused: the router's auxiliary loss (output_router_logits: true), router
// jitter noise, Qwen2-MoE's sliding window (use_sliding_window: true).
#include "plan/models_moe.h"

#include <string>

#include "plan/decoder_skeleton.h"
#include "plan/error.h"
#include "plan/graph_builder.h"
#include "plan/hf_config.h"
#include "plan/json_input.h"
#include "plan/model_limits.h"

namespace shardscope::plan {

namespace {

void read_activation(const HfConfigReader& r, MoeConfig& c) {
  c.hidden_act = r.get_string("hidden_act", "silu");
  if (c.hidden_act != "silu" && c.hidden_act != "gelu" && c.hidden_act != "gelu_pytorch_tanh")
    r.fail("hidden_act", "unsupported activation '" + quote_input(c.hidden_act) +
                             "' (supported: silu, gelu, gelu_pytorch_tanh)");
}

// Refuses, naming the expert and layer keys, a config whose graph would
// exceed kMaxGraphOps: counted from the config, before anything is built.
void check_graph_size(const HfConfigReader& r, const MoeConfig& c, const char* experts_key) {
  const int64_t ops = moe_graph_ops(c);
  if (ops > kMaxGraphOps)
    r.fail(experts_key, std::to_string(c.num_experts) + " experts in each routed layer of " +
                            std::to_string(c.num_hidden_layers) +
                            " (num_hidden_layers) would make a graph of " + std::to_string(ops) +
                            " ops (five per expert and layer), over the limit of " +
                            std::to_string(kMaxGraphOps) + " graph ops");
}

}  // namespace

int64_t moe_graph_ops(const MoeConfig& c) {
  const bool qwen = c.model_type == "qwen2_moe";
  // Per layer: input_layernorm, q/k/v_proj, attention, o_proj, residual_1,
  // post_attention_layernorm, residual_2 (9); then a dense MLP (gate, up,
  // swiglu, down: 4) or gate, router, five per expert (dispatch, two input
  // projections, swiglu, output projection), combine, and Qwen2-MoE's shared
  // expert (4), its gate, sigmoid gate and sum (3). Embedding, final norm,
  // lm_head and the loss: 4. Sizes are bounded (hf_size_limit): no overflow.
  const int64_t routed_layer = 9 + 3 + 5 * c.num_experts + (qwen ? 7 : 0);
  const int64_t dense_layer = 9 + 4;
  int64_t ops = 4;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const bool sparse = c.sparse_layers.empty() || c.sparse_layers[static_cast<size_t>(i)];
    ops += sparse ? routed_layer : dense_layer;
  }
  return ops;
}

MoeConfig moe_config_from_hf(const nlohmann::json& config, const std::string& source) {
  HfConfigReader r(config, source);
  MoeConfig c;
  c.model_type = r.get_string("model_type", "mixtral");
  const bool qwen = c.model_type == "qwen2_moe";
  if (c.model_type != "mixtral" && !qwen)
    r.fail("model_type",
           "expected \"mixtral\" or \"qwen2_moe\", got \"" + quote_input(c.model_type) + "\"");
  c.hidden_size = r.require_int("hidden_size");
  c.intermediate_size = r.require_int("intermediate_size");
  c.num_hidden_layers = r.require_int("num_hidden_layers");
  c.num_attention_heads = r.require_int("num_attention_heads");
  c.vocab_size = r.require_int("vocab_size");
  // transformers' defaults: MixtralConfig 8 kv heads, 131072 positions,
  // rms_norm_eps 1e-5, rope_theta 1e6; Qwen2MoeConfig 16, 32768, 1e-6, 1e4.
  c.max_position_embeddings = r.get_int("max_position_embeddings", qwen ? 32768 : 131072);
  c.num_key_value_heads = r.get_int("num_key_value_heads", qwen ? 16 : 8);
  r.check_kv_heads(c.num_attention_heads, c.num_key_value_heads);
  c.head_dim = r.get_int("head_dim", 0);
  r.check_derived_head_dim(c.hidden_size, c.num_attention_heads, c.head_dim);
  // Qwen2MoeAttention raises unless head_dim * heads == hidden_size.
  if (qwen && c.head_dim != 0 && c.head_dim * c.num_attention_heads != c.hidden_size)
    r.fail("head_dim", "Qwen2-MoE needs head_dim * num_attention_heads == hidden_size");
  c.rms_norm_eps = r.get_double("rms_norm_eps", qwen ? 1e-6 : 1e-5);
  c.rope_theta = r.get_double("rope_theta", qwen ? 10000.0 : 1e6);
  if (const nlohmann::json* v = r.get("rope_scaling")) {
    if (!v->is_object())
      r.fail("rope_scaling", "expected an object or null, got " + quote_input(v->dump()));
    c.rope_scaling = *v;
  }
  read_activation(r, c);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", false);
  if (r.get_bool("output_router_logits", false))
    r.fail("output_router_logits",
           "true adds the router's load-balancing loss (router_aux_loss_coef), which is not "
           "modelled; set it false");
  if (!qwen) {
    c.sliding_window = r.get_int("sliding_window", 0);
    c.num_experts = r.get_int("num_local_experts", 8);
    c.top_k = r.get_int("num_experts_per_tok", 2);
    if (c.top_k > c.num_experts)
      r.fail("num_experts_per_tok", std::to_string(c.top_k) + " exceeds num_local_experts " +
                                        std::to_string(c.num_experts));
    if (const nlohmann::json* v = r.get("router_jitter_noise")) {
      if (!v->is_number() || v->get<double>() != 0.0)
        r.fail("router_jitter_noise",
               "only 0 is supported (the multiplicative noise on the router's input in training "
               "is not modelled), got " +
                   quote_input(v->dump()));
    }
    c.moe_intermediate_size = c.intermediate_size;
    c.norm_topk_prob = true;
    c.sparse_layers.assign(static_cast<size_t>(c.num_hidden_layers), true);
    check_graph_size(r, c, "num_local_experts");
    return c;
  }
  // Qwen2MoeConfig always carries sliding_window; it applies only with use_sliding_window.
  if (r.get_bool("use_sliding_window", false))
    r.fail("use_sliding_window",
           "true is not supported (Qwen2-MoE slides on the layers from max_window_layers on "
           "only); the published Qwen1.5-MoE and Qwen2-MoE configs set it false");
  c.qkv_bias = r.get_bool("qkv_bias", true);
  c.num_experts = r.get_int("num_experts", 60, 0);
  c.top_k = r.get_int("num_experts_per_tok", 4);
  if (c.num_experts > 0 && c.top_k > c.num_experts)
    r.fail("num_experts_per_tok",
           std::to_string(c.top_k) + " exceeds num_experts " + std::to_string(c.num_experts));
  c.moe_intermediate_size = r.get_int("moe_intermediate_size", 1408);
  c.shared_expert_intermediate_size = r.get_int("shared_expert_intermediate_size", 5632);
  c.norm_topk_prob = r.get_bool("norm_topk_prob", false);
  const int64_t step = r.get_int("decoder_sparse_step", 1);
  std::vector<bool> mlp_only(static_cast<size_t>(c.num_hidden_layers), false);
  if (const nlohmann::json* v = r.get("mlp_only_layers")) {
    if (!v->is_array())
      r.fail("mlp_only_layers",
             "expected an array of layer indices, got " + quote_input(v->dump()));
    for (const nlohmann::json& i : *v) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= c.num_hidden_layers)
        r.fail("mlp_only_layers", "entry " + quote_input(i.dump()) +
                                      " is not a layer index in [0, " +
                                      std::to_string(c.num_hidden_layers) + ")");
      mlp_only[static_cast<size_t>(i.get<int64_t>())] = true;
    }
  }
  // Qwen2MoeDecoderLayer: routed when the layer is not in mlp_only_layers and
  // num_experts > 0 and (layer_idx + 1) % decoder_sparse_step == 0.
  c.sparse_layers.assign(static_cast<size_t>(c.num_hidden_layers), false);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    c.sparse_layers[static_cast<size_t>(i)] =
        !mlp_only[static_cast<size_t>(i)] && c.num_experts > 0 && (i + 1) % step == 0;
  check_graph_size(r, c, "num_experts");
  return c;
}

Graph build_moe(const MoeConfig& c, const std::string& name) {
  const bool qwen = c.model_type == "qwen2_moe";
  if (c.model_type != "mixtral" && !qwen)
    throw Error("moe config for '" + name + "': model_type must be mixtral or qwen2_moe");
  const int64_t D = c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_attention_heads;
  check_decoder_sizes(
      "moe", name,
      {c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
       c.num_key_value_heads, c.vocab_size, c.max_position_embeddings, D});
  std::vector<bool> sparse = c.sparse_layers;
  if (sparse.empty()) sparse.assign(static_cast<size_t>(c.num_hidden_layers), true);
  bool any_sparse = false;
  for (bool s : sparse) any_sparse = any_sparse || s;
  if (sparse.size() != static_cast<size_t>(c.num_hidden_layers))
    throw Error("moe config for '" + name + "': one sparse_layers entry per layer expected");
  const int64_t Fe = c.moe_intermediate_size > 0 ? c.moe_intermediate_size : c.intermediate_size;
  if (any_sparse && (c.num_experts < 1 || c.top_k < 1 || c.top_k > c.num_experts || Fe < 1 ||
                     (qwen && c.shared_expert_intermediate_size < 1)))
    throw Error("moe config for '" + name +
                "': routed layers need 1 <= top_k <= num_experts, positive expert sizes and "
                "(Qwen2-MoE) a shared expert");
  const std::string gate_act = gated_activation(c.hidden_act, "moe", name);

  const std::string P = qwen ? "Qwen2Moe" : "Mixtral";
  const int64_t C = c.hidden_size, E = c.num_experts, k = c.top_k;
  OpAttrs attn_attrs =
      rope_attention_attrs(c.rope_theta, static_cast<double>(D), c.rope_scaling, c.sliding_window);
  // Qwen2MoeSdpaAttention (transformers 4.57's own class, not the shared SDPA
  // integration) calls repeat_kv before SDPA whatever the mask: SDPA keeps k
  // and v at n_head heads. Mixtral's attention passes enable_gqa instead.
  if (qwen && c.num_key_value_heads < c.num_attention_heads) attn_attrs.repeat_kv = true;
  const SelfAttentionShape attn_shape{
      C, c.num_attention_heads, c.num_key_value_heads, D, c.qkv_bias, false};

  const DecoderSkeleton skeleton = skeleton_of(c, name, c.model_type, P);

  DecoderHooks hooks;
  hooks.layer = [&](GraphBuilder& gb, int layer, int64_t i, int x) {
    auto proj = [&](int parent, const char* local, int in_tensor, int64_t in, int64_t out) {
      return linear_module(gb, parent, local, in_tensor, in, out, false);
    };
    // A gated MLP (gate/up -> act * up -> down) under `mlp`, named as the family names it.
    auto gated_mlp = [&](int mlp, int in, int64_t f, const char* gate_name, const char* up_name,
                         const char* down_name) {
      const int g = proj(mlp, gate_name, in, C, f);
      const int u = proj(mlp, up_name, in, C, f);
      return proj(mlp, down_name, gb.swiglu(mlp, g, u, gate_act), f, C);
    };
    const int a = decoder_norm(gb, skeleton, layer, "input_layernorm", x);
    const int attn = gb.add_module(layer, "self_attn", P + "Attention");
    x = gb.residual(layer, "residual_1", x, self_attention(gb, attn, a, attn_shape, attn_attrs));
    const int b = decoder_norm(gb, skeleton, layer, "post_attention_layernorm", x);
    int out = -1;
    if (!sparse[static_cast<size_t>(i)]) {
      const int mlp = gb.add_module(layer, "mlp", "Qwen2MoeMLP");
      out = gated_mlp(mlp, b, c.intermediate_size, "gate_proj", "up_proj", "down_proj");
    } else {
      const int moe = gb.add_module(layer, qwen ? "mlp" : "block_sparse_moe", P + "SparseMoeBlock");
      const int logits = proj(moe, "gate", b, C, E);
      const GraphBuilder::MoeRoute route = gb.moe_router(moe, logits, E, k, c.norm_topk_prob);
      const int experts = gb.add_module(moe, "experts", "ModuleList", true);
      std::vector<int> expert_out, slots;
      for (int64_t e = 0; e < E; ++e) {
        const int expert = gb.add_module(experts, std::to_string(e),
                                         qwen ? "Qwen2MoeMLP" : "MixtralBlockSparseTop2MLP");
        const GraphBuilder::MoeRows rows = gb.moe_dispatch(expert, b, route.indices, e, E, k);
        expert_out.push_back(
            qwen ? gated_mlp(expert, rows.x, Fe, "gate_proj", "up_proj", "down_proj")
                 : gated_mlp(expert, rows.x, Fe, "w1", "w3", "w2"));
        slots.push_back(rows.slots);
      }
      out = gb.moe_combine(moe, expert_out, slots, route.weights, E, k);
      if (qwen) {
        const int shared = gb.add_module(moe, "shared_expert", "Qwen2MoeMLP");
        const int s = gated_mlp(shared, b, c.shared_expert_intermediate_size, "gate_proj",
                                "up_proj", "down_proj");
        const int g = proj(moe, "shared_expert_gate", b, C, 1);
        out = gb.residual(moe, "shared_add", out, gb.sigmoid_gate(moe, "shared_gate", g, s));
      }
    }
    return gb.residual(layer, "residual_2", x, out);
  };
  return build_decoder(skeleton, hooks);
}

}  // namespace shardscope::plan
