// Llama / Mistral / Qwen2 / Qwen3 (Hugging Face LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM), module for module
// (P = "Llama", "Mistral", "Qwen2" or "Qwen3"):
//   ""                            PForCausalLM
//   model                         PModel
//   model.embed_tokens            Embedding [V, C]
//   model.layers                  ModuleList
//   model.layers.<i>              PDecoderLayer: input_layernorm PRMSNorm,
//                                 self_attn PAttention (q_proj C->H*D, k_proj and
//                                 v_proj C->Hkv*D, o_proj H*D->C, Linear),
//                                 post_attention_layernorm PRMSNorm, mlp PMLP
//                                 (gate_proj, up_proj C->F, down_proj F->C)
//   model.norm                    PRMSNorm
//   lm_head                       Linear C->V (tied to model.embed_tokens.weight
//                                 when tie_word_embeddings)
// Qwen2 (Qwen2.5 too) is Llama's layer with a bias on q_proj, k_proj and
// v_proj (transformers' Qwen2Attention: bias=True on those three, False on
// o_proj and the MLP); its sliding window (use_sliding_window, off in every
// published Qwen2/2.5 config) is refused.
// Qwen3 is Llama's layer (attention_bias on q/k/v/o_proj, default head_dim
// 128) plus self_attn.q_norm and self_attn.k_norm (Qwen3RMSNorm, weight
// [head_dim]) applied to every head of q_proj's and k_proj's outputs before
// RoPE: rmsnorm ops over groups of head_dim (one rstd per head); module order
// q_proj, q_norm, k_proj, k_norm, v_proj, o_proj (forward order). Its sliding
// window is refused as Qwen2's.
// RoPE has no parameters (LlamaRotaryEmbedding is left out); the attention op
// applies it. Ops per layer: input_layernorm, q_proj, k_proj, v_proj, attention,
// o_proj, residual_1, post_attention_layernorm, gate_proj, up_proj, swiglu,
// down_proj, residual_2.
#include "plan/models_llama.h"

#include <cmath>

#include "plan/error.h"
#include "plan/graph_builder.h"
#include "plan/hf_config.h"
#include "plan/json_input.h"

namespace shardscope::plan {

LlamaConfig llama_config_from_hf(const nlohmann::json& config, const std::string& source) {
  HfConfigReader r(config, source);
  LlamaConfig c;
  c.model_type = r.get_string("model_type", "llama");
  if (c.model_type != "llama" && c.model_type != "mistral" && c.model_type != "qwen2" &&
      c.model_type != "qwen3")
    r.fail("model_type", "expected \"llama\", \"mistral\", \"qwen2\" or \"qwen3\", got \"" +
                             quote_input(c.model_type) + "\"");
  const bool qwen3 = c.model_type == "qwen3";
  const bool qwen2 = c.model_type == "qwen2";
  const bool qwen = qwen2 || qwen3;
  c.qk_norm = qwen3;
  c.hidden_size = r.require_int("hidden_size");
  c.intermediate_size = r.require_int("intermediate_size");
  c.num_hidden_layers = r.require_int("num_hidden_layers");
  c.num_attention_heads = r.require_int("num_attention_heads");
  c.vocab_size = r.require_int("vocab_size");
  c.max_position_embeddings = r.require_int("max_position_embeddings");
  // transformers' defaults: LlamaConfig uses num_attention_heads, MistralConfig 8,
  // Qwen2Config and Qwen3Config 32.
  c.num_key_value_heads = r.get_int(
      "num_key_value_heads", c.model_type == "mistral" ? 8 : (qwen ? 32 : c.num_attention_heads));
  r.check_kv_heads(c.num_attention_heads, c.num_key_value_heads);
  c.head_dim = r.get_int("head_dim", qwen3 ? 128 : 0);  // Qwen3Config: head_dim 128
  r.check_derived_head_dim(c.hidden_size, c.num_attention_heads, c.head_dim);
  c.rms_norm_eps = r.get_double("rms_norm_eps", c.rms_norm_eps);
  c.rope_theta = r.get_double("rope_theta", c.rope_theta);
  if (const nlohmann::json* v = r.get("rope_scaling")) {
    if (!v->is_object()) r.fail("rope_scaling", "expected an object or null, got " + v->dump());
    c.rope_scaling = *v;  // changes no parameter; recorded for the attention op
  }
  if (qwen) {
    // Qwen2Config / Qwen3Config always carry sliding_window; it applies only
    // with use_sliding_window, and then only to layers >= max_window_layers.
    if (r.get_bool("use_sliding_window", false))
      r.fail("use_sliding_window",
             std::string("true is not supported (") + (qwen3 ? "Qwen3" : "Qwen2") +
                 " slides on the layers from max_window_layers on only); every published " +
                 (qwen3 ? "Qwen3" : "Qwen2 and Qwen2.5") + " config sets it false");
    if (qwen2)
      for (const char* key : {"attention_bias", "mlp_bias"})
        if (r.has(key))
          r.fail(key, "not a Qwen2 key: Qwen2 has biases on q/k/v_proj and none elsewhere");
    if (qwen3 && r.has("mlp_bias")) r.fail("mlp_bias", "not a Qwen3 key: Qwen3's MLP has no bias");
  } else {
    c.sliding_window = r.get_int("sliding_window", 0);
  }
  c.hidden_act = r.get_string("hidden_act", "silu");
  if (c.hidden_act != "silu" && c.hidden_act != "gelu" && c.hidden_act != "gelu_pytorch_tanh" &&
      c.hidden_act != "gelu_new")
    r.fail("hidden_act", "unsupported activation '" + c.hidden_act +
                             "' (supported: silu, gelu, gelu_pytorch_tanh, gelu_new)");
  c.attention_bias = !qwen2 && r.get_bool("attention_bias", false);
  c.mlp_bias = !qwen && r.get_bool("mlp_bias", false);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", false);
  // pretraining_tp only splits HF's matmuls (same math); attention_dropout is
  // dropout, which is not modeled: both accepted.
  return c;
}

Graph build_llama(const LlamaConfig& c, const std::string& name) {
  const int64_t head_dim = c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_attention_heads;
  if (c.hidden_size < 1 || c.intermediate_size < 1 || c.num_hidden_layers < 1 ||
      c.num_attention_heads < 1 || c.num_key_value_heads < 1 || c.vocab_size < 1 ||
      c.max_position_embeddings < 1 || head_dim < 1 ||
      c.num_attention_heads % c.num_key_value_heads != 0)
    throw Error("llama config for '" + name +
                "': sizes must be positive and num_attention_heads a multiple of "
                "num_key_value_heads");
  if (c.model_type != "llama" && c.model_type != "mistral" && c.model_type != "qwen2" &&
      c.model_type != "qwen3")
    throw Error("llama config for '" + name +
                "': model_type must be llama, mistral, qwen2 or qwen3");
  const bool qwen2 = c.model_type == "qwen2";
  const std::string P = c.model_type == "mistral" ? "Mistral"
                        : qwen2                   ? "Qwen2"
                        : c.model_type == "qwen3" ? "Qwen3"
                                                  : "Llama";
  const bool qkv_bias = qwen2 || c.attention_bias, o_bias = !qwen2 && c.attention_bias;
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t H = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const double eps = c.rms_norm_eps;

  OpAttrs attn_attrs;
  attn_attrs.rope = true;
  attn_attrs.rope_theta = c.rope_theta;
  attn_attrs.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  if (!c.rope_scaling.is_null()) attn_attrs.rope_scaling = c.rope_scaling.dump();
  if (c.sliding_window > 0) attn_attrs.sliding_window = c.sliding_window;

  // The MLP's act_fn (ACT2FN[hidden_act]): SiLU and F.gelu are fused;
  // gelu_new is NewGELUActivation's Python expression (3 more saved tensors,
  // see models_gpt2.cpp).
  std::string gated_activation = "silu";
  int unfused_saved = 0, unfused_bwd_temps = 0;
  if (c.hidden_act == "gelu") {
    gated_activation = "gelu";
  } else if (c.hidden_act == "gelu_pytorch_tanh" || c.hidden_act == "gelu_new") {
    gated_activation = "gelu_tanh";
    unfused_saved = c.hidden_act == "gelu_new" ? 3 : 0;
    unfused_bwd_temps = c.hidden_act == "gelu_new" ? 1 : 0;  // see models_gpt2.cpp
  } else if (c.hidden_act != "silu") {
    throw Error("llama config for '" + name + "': unsupported hidden_act '" + c.hidden_act + "'");
  }
  const bool own_family = qwen2 || c.model_type == "qwen3";
  GraphBuilder gb(name, own_family ? c.model_type : "llama", c.max_position_embeddings, V);
  const int ids = gb.add_input("input_ids", {dim_b(), dim_t()}, DType::i64);
  const int labels = gb.add_input("labels", {dim_b(), dim_t()}, DType::i64);

  const int root = gb.add_module(-1, "", P + "ForCausalLM");
  const int model = gb.add_module(root, "model", P + "Model");
  int x = gb.embedding(gb.add_module(model, "embed_tokens", "Embedding"), ids, V, C);
  const int embed_weight = gb.graph().find_param("model.embed_tokens.weight");

  const int layers = gb.add_module(model, "layers", "ModuleList", true);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const int layer = gb.add_module(layers, std::to_string(i), P + "DecoderLayer");
    const int a = gb.rmsnorm(gb.add_module(layer, "input_layernorm", P + "RMSNorm"), x, C, eps);
    const int attn = gb.add_module(layer, "self_attn", P + "Attention");
    auto proj = [&](int parent, const char* local, int in_tensor, int64_t in, int64_t out,
                    bool bias) {
      return gb.linear(gb.add_module(parent, local, "Linear"), in_tensor, in, out, bias,
                       WeightLayout::out_in);
    };
    // Qwen3: q_norm / k_norm over each head's head_dim elements.
    auto head_norm = [&](const char* local, int in, int64_t heads) {
      if (!c.qk_norm) return in;
      return gb.rmsnorm(gb.add_module(attn, local, P + "RMSNorm"), in, head_dim, eps, 0.0, heads);
    };
    const int q = head_norm("q_norm", proj(attn, "q_proj", a, C, H * head_dim, qkv_bias), H);
    const int k = head_norm("k_norm", proj(attn, "k_proj", a, C, Hkv * head_dim, qkv_bias), Hkv);
    const int v = proj(attn, "v_proj", a, C, Hkv * head_dim, qkv_bias);
    const int y = gb.attention(attn, {q, k, v}, H, Hkv, head_dim, attn_attrs);
    const int attn_out = proj(attn, "o_proj", y, H * head_dim, C, o_bias);
    x = gb.residual(layer, "residual_1", x, attn_out);

    const int b =
        gb.rmsnorm(gb.add_module(layer, "post_attention_layernorm", P + "RMSNorm"), x, C, eps);
    const int mlp = gb.add_module(layer, "mlp", P + "MLP");
    const int gate = proj(mlp, "gate_proj", b, C, F, c.mlp_bias);
    const int up = proj(mlp, "up_proj", b, C, F, c.mlp_bias);
    const int s = gb.swiglu(mlp, gate, up, gated_activation, unfused_saved, unfused_bwd_temps);
    const int mlp_out = proj(mlp, "down_proj", s, F, C, c.mlp_bias);
    x = gb.residual(layer, "residual_2", x, mlp_out);
  }
  x = gb.rmsnorm(gb.add_module(model, "norm", P + "RMSNorm"), x, C, eps);
  const int logits = gb.linear(gb.add_module(root, "lm_head", "Linear"), x, C, V, false,
                               WeightLayout::out_in, c.tie_word_embeddings ? embed_weight : -1);
  return gb.finish(gb.cross_entropy(root, logits, labels, V));
}

}  // namespace shardscope::plan
