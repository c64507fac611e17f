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

#include "plan/decoder_skeleton.h"
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
  check_decoder_sizes(
      "llama", name,
      {c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
       c.num_key_value_heads, c.vocab_size, c.max_position_embeddings, head_dim});
  if (c.model_type != "llama" && c.model_type != "mistral" && c.model_type != "qwen2" &&
      c.model_type != "qwen3")
    throw Error("llama config for '" + name +
                "': model_type must be llama, mistral, qwen2 or qwen3");
  const bool qwen2 = c.model_type == "qwen2";
  const std::string P = c.model_type == "mistral" ? "Mistral"
                        : qwen2                   ? "Qwen2"
                        : c.model_type == "qwen3" ? "Qwen3"
                                                  : "Llama";
  const SelfAttentionShape attn_shape{
      c.hidden_size, c.num_attention_heads,     c.num_key_value_heads,
      head_dim,      qwen2 || c.attention_bias, !qwen2 && c.attention_bias};
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  const OpAttrs attn_attrs = rope_attention_attrs(c.rope_theta, static_cast<double>(head_dim),
                                                  c.rope_scaling, c.sliding_window);

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
  const DecoderSkeleton skeleton = skeleton_of(c, name, own_family ? c.model_type : "llama", P);

  DecoderHooks hooks;
  hooks.layer = [&](GraphBuilder& gb, int layer, int64_t, int x) {
    const int a = decoder_norm(gb, skeleton, layer, "input_layernorm", x);
    const int attn = gb.add_module(layer, "self_attn", P + "Attention");
    // Qwen3: q_norm / k_norm over each head's head_dim elements.
    HeadNorm head_norm;
    if (c.qk_norm)
      head_norm = [&](const char* local, int in, int64_t heads) {
        return gb.rmsnorm(gb.add_module(attn, local, P + "RMSNorm"), in, head_dim, c.rms_norm_eps,
                          0.0, heads);
      };
    const int attn_out = self_attention(gb, attn, a, attn_shape, attn_attrs, head_norm);
    x = gb.residual(layer, "residual_1", x, attn_out);

    const int b = decoder_norm(gb, skeleton, layer, "post_attention_layernorm", x);
    const int mlp = gb.add_module(layer, "mlp", P + "MLP");
    const int gate = linear_module(gb, mlp, "gate_proj", b, C, F, c.mlp_bias);
    const int up = linear_module(gb, mlp, "up_proj", b, C, F, c.mlp_bias);
    const int s = gb.swiglu(mlp, gate, up, gated_activation, unfused_saved, unfused_bwd_temps);
    const int mlp_out = linear_module(gb, mlp, "down_proj", s, F, C, c.mlp_bias);
    return gb.residual(layer, "residual_2", x, mlp_out);
  };
  return build_decoder(skeleton, hooks);
}

}  // namespace shardscope::plan
