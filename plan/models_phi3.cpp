// Phi-3 (Hugging Face Phi3ForCausalLM, transformers 4.57), module for module:
//   ""                            Phi3ForCausalLM
//   model                         Phi3Model
//   model.embed_tokens            Embedding [V, C]
//   model.layers.<i>              Phi3DecoderLayer: input_layernorm Phi3RMSNorm,
//                                 self_attn Phi3Attention (qkv_proj C->(H+2*Hkv)*D,
//                                 o_proj H*D->C, Linear, no bias),
//                                 post_attention_layernorm Phi3RMSNorm, mlp Phi3MLP
//                                 (gate_up_proj C->2F, down_proj F->C)
//   model.norm                    Phi3RMSNorm
//   lm_head                       Linear C->V
// qkv_proj's output is packed [q: H*D | k: Hkv*D | v: Hkv*D] and sliced into
// views, so the attention op reads one packed input (qkv_packed, grouped
// query heads allowed); gate_up_proj's output is chunk(2): gate then up, one
// packed input of the gated MLP (swiglu packed). Phi3Model applies
// sliding_window (Phi-3-mini: 2047) on every layer through the mask when the
// config sets it: recorded on every attention op. Phi-3's rotary ends in
// torch.cat (its partial-rotary form), so q reaches SDPA as a contiguous
// [B, H, T, D] tensor and o_proj saves a copy of SDPA's output (attr
// rope_cat). partial_rotary_factor other
// than 1 is refused. Dropouts (resid_pdrop, embd_pdrop, attention_dropout)
// are not modelled, as for every family.
#include "plan/models_phi3.h"

#include <string>

#include "plan/decoder_skeleton.h"
#include "plan/error.h"
#include "plan/graph_builder.h"
#include "plan/hf_config.h"
#include "plan/json_input.h"

namespace shardscope::plan {

Phi3Config phi3_config_from_hf(const nlohmann::json& config, const std::string& source) {
  HfConfigReader r(config, source);
  Phi3Config c;
  const std::string type = r.get_string("model_type", "phi3");
  if (type != "phi3") r.fail("model_type", "expected \"phi3\", got \"" + quote_input(type) + "\"");
  c.hidden_size = r.require_int("hidden_size");
  c.intermediate_size = r.require_int("intermediate_size");
  c.num_hidden_layers = r.require_int("num_hidden_layers");
  c.num_attention_heads = r.require_int("num_attention_heads");
  c.vocab_size = r.require_int("vocab_size");
  c.max_position_embeddings = r.require_int("max_position_embeddings");
  // Phi3Config: num_key_value_heads None -> num_attention_heads.
  c.num_key_value_heads = r.get_int("num_key_value_heads", c.num_attention_heads);
  r.check_kv_heads(c.num_attention_heads, c.num_key_value_heads);
  c.head_dim = r.get_int("head_dim", 0);
  r.check_derived_head_dim(c.hidden_size, c.num_attention_heads, c.head_dim);
  c.rms_norm_eps = r.get_double("rms_norm_eps", c.rms_norm_eps);
  c.rope_theta = r.get_double("rope_theta", c.rope_theta);
  if (const nlohmann::json* v = r.get("rope_scaling")) {
    if (!v->is_object())
      r.fail("rope_scaling", "expected an object or null, got " + quote_input(v->dump()));
    c.rope_scaling = *v;  // longrope (128k models): recorded; the engines refuse it
  }
  if (const nlohmann::json* v = r.get("partial_rotary_factor")) {
    if (!v->is_number() || v->get<double>() != 1.0)
      r.fail("partial_rotary_factor",
             "only 1.0 is supported (RoPE over the whole head), got " + quote_input(v->dump()));
  }
  c.sliding_window = r.get_int("sliding_window", 0);
  c.hidden_act = r.get_string("hidden_act", "silu");
  if (c.hidden_act != "silu" && c.hidden_act != "gelu" && c.hidden_act != "gelu_pytorch_tanh")
    r.fail("hidden_act", "unsupported activation '" + quote_input(c.hidden_act) +
                             "' (supported: silu, gelu, gelu_pytorch_tanh)");
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (r.get_bool(key, false))
      r.fail(key, "true is not a Phi-3 setting: transformers' Phi3 has no biases");
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", false);
  return c;
}

Graph build_phi3(const Phi3Config& c, const std::string& name) {
  const int64_t D = c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_attention_heads;
  check_decoder_sizes(
      "phi3", name,
      {c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
       c.num_key_value_heads, c.vocab_size, c.max_position_embeddings, D});
  const std::string gate_act = gated_activation(c.hidden_act, "phi3", name);
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  const int64_t H = c.num_attention_heads, Hkv = c.num_key_value_heads;
  OpAttrs attn_attrs =
      rope_attention_attrs(c.rope_theta, static_cast<double>(D), c.rope_scaling, c.sliding_window);
  attn_attrs.rope_cat = true;  // apply_rotary_pos_emb: torch.cat([rotated, pass-through])

  const DecoderSkeleton skeleton = skeleton_of(c, name, "phi3", "Phi3");

  DecoderHooks hooks;
  hooks.layer = [&](GraphBuilder& gb, int layer, int64_t, int x) {
    const int a = decoder_norm(gb, skeleton, layer, "input_layernorm", x);
    const int attn = gb.add_module(layer, "self_attn", "Phi3Attention");
    const int qkv = linear_module(gb, attn, "qkv_proj", a, C, (H + 2 * Hkv) * D, false);
    const int y = gb.attention(attn, {qkv}, H, Hkv, D, attn_attrs);
    x = gb.residual(layer, "residual_1", x, linear_module(gb, attn, "o_proj", y, H * D, C, false));
    const int b = decoder_norm(gb, skeleton, layer, "post_attention_layernorm", x);
    const int mlp = gb.add_module(layer, "mlp", "Phi3MLP");
    const int s = gb.swiglu_packed(mlp, linear_module(gb, mlp, "gate_up_proj", b, C, 2 * F, false),
                                   F, gate_act);
    return gb.residual(layer, "residual_2", x, linear_module(gb, mlp, "down_proj", s, F, C, false));
  };
  return build_decoder(skeleton, hooks);
}

}  // namespace shardscope::plan
