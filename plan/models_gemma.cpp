// Gemma / Gemma 2 (Hugging Face GemmaForCausalLM, Gemma2ForCausalLM,
// transformers 4.57), module for module (P = "Gemma" or "Gemma2"):
//   ""                            PForCausalLM
//   model                         PModel (op model.normalizer: x * sqrt(hidden_size))
//   model.embed_tokens            Embedding [V, C]
//   model.layers.<i>              PDecoderLayer: input_layernorm PRMSNorm,
//                                 self_attn PAttention (q_proj C->H*D, k_proj and
//                                 v_proj C->Hkv*D, o_proj H*D->C; D = head_dim,
//                                 explicit), post_attention_layernorm PRMSNorm,
//                                 [Gemma 2: pre_feedforward_layernorm PRMSNorm,]
//                                 mlp PMLP (gate_proj, up_proj C->F, down_proj
//                                 F->C), [Gemma 2: post_feedforward_layernorm]
//   model.norm                    PRMSNorm
//   lm_head                       Linear C->V (tied to model.embed_tokens.weight
//                                 when tie_word_embeddings, the default)
// Differences from Llama, each modelled:
//  - the embedding output is multiplied by sqrt(hidden_size) as a tensor of
//    the activation dtype (a scale op; bf16 rounds sqrt(3072) to 55.5);
//  - PRMSNorm computes x * rstd * (1 + weight) in fp32 (weight_offset 1; HF
//    initialises the weight to zeros);
//  - the MLP gate is GELU: Gemma's act_fn is ACT2FN[hidden_act] (its config's
//    hidden_activation is stored but unused by transformers 4.57), Gemma 2's
//    ACT2FN[hidden_activation] (hidden_act unused); gelu_pytorch_tanh and
//    gelu are fused F.gelu calls (saved tensors as SiLU's);
//  - Gemma 2: sandwich norms (the attention and MLP outputs are normalised
//    before their residual add), attention scale query_pre_attn_scalar^-0.5,
//    attn_logit_softcapping on the attention scores (attention attr softcap),
//    final_logit_softcapping on the logits (a softcap op before the loss),
//    and sliding_window on the layers layer_types marks "sliding_attention"
//    (default: the even layers 0, 2, ...).
// Attention memory is SDPA/flash-style as for every family (no T x T matrix
// saved). transformers 4.57 runs Gemma 2 with SDPA by default, which drops
// attn_logit_softcapping (only eager and flash_attention_2 apply it) and
// keeps no T x T; eager, which applies it, keeps the T x T probabilities
// (fp32 softmax output, bf16 copy, tanh output) per layer, which shardscope
// does not model. shardscope computes the soft-capped scores, as eager and
// flash_attention_2 do, with flash-attention memory.
#include "plan/models_gemma.h"

#include <cmath>
#include <string>

#include "plan/decoder_skeleton.h"
#include "plan/error.h"
#include "plan/graph_builder.h"
#include "plan/hf_config.h"
#include "plan/json_input.h"

namespace shardscope::plan {

namespace {

bool is_null_key(const nlohmann::json& config, const char* key) {
  return config.contains(key) && config[key].is_null();
}

// A softcapping key: null -> 0 (off), absent -> Gemma2Config's default, else a number > 0.
double softcapping(const HfConfigReader& r, const nlohmann::json& config, const char* key,
                   double fallback) {
  return is_null_key(config, key) ? 0.0 : r.get_double(key, fallback);
}

}  // namespace

GemmaConfig gemma_config_from_hf(const nlohmann::json& config, const std::string& source) {
  HfConfigReader r(config, source);
  GemmaConfig c;
  c.model_type = r.get_string("model_type", "gemma");
  if (c.model_type != "gemma" && c.model_type != "gemma2")
    r.fail("model_type",
           "expected \"gemma\" or \"gemma2\", got \"" + quote_input(c.model_type) + "\"");
  const bool gemma2 = c.model_type == "gemma2";
  c.hidden_size = r.require_int("hidden_size");
  c.intermediate_size = r.require_int("intermediate_size");
  c.num_hidden_layers = r.require_int("num_hidden_layers");
  c.num_attention_heads = r.require_int("num_attention_heads");
  c.vocab_size = r.require_int("vocab_size");
  c.max_position_embeddings = r.require_int("max_position_embeddings");
  // transformers' defaults: GemmaConfig 16 kv heads, Gemma2Config 4; head_dim 256 both.
  c.num_key_value_heads = r.get_int("num_key_value_heads", gemma2 ? 4 : 16);
  r.check_kv_heads(c.num_attention_heads, c.num_key_value_heads);
  c.head_dim = r.get_int("head_dim", 256);
  r.check_attention_width(c.num_attention_heads, c.head_dim);
  c.rms_norm_eps = r.get_double("rms_norm_eps", c.rms_norm_eps);
  c.rope_theta = r.get_double("rope_theta", c.rope_theta);
  if (const nlohmann::json* v = r.get("rope_scaling")) {
    if (!v->is_object())
      r.fail("rope_scaling", "expected an object or null, got " + quote_input(v->dump()));
    c.rope_scaling = *v;
  }
  const char* act_key = gemma2 ? "hidden_activation" : "hidden_act";
  c.hidden_act = r.get_string(act_key, "gelu_pytorch_tanh");
  if (c.hidden_act != "gelu" && c.hidden_act != "gelu_pytorch_tanh")
    r.fail(act_key, "unsupported activation '" + quote_input(c.hidden_act) +
                        "' (supported: gelu, gelu_pytorch_tanh)");
  c.attention_bias = r.get_bool("attention_bias", false);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", true);
  if (!gemma2) {
    for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping",
                            "query_pre_attn_scalar", "sliding_window", "layer_types"})
      if (r.has(key))
        r.fail(key,
               "a Gemma 2 key: transformers' Gemma (model_type gemma) does not apply it; "
               "use model_type gemma2");
    return c;
  }
  c.query_pre_attn_scalar = r.get_double("query_pre_attn_scalar", 256.0);
  c.final_logit_softcapping = softcapping(r, config, "final_logit_softcapping", 30.0);
  c.attn_logit_softcapping = softcapping(r, config, "attn_logit_softcapping", 50.0);
  c.sliding_window = is_null_key(config, "sliding_window") ? 0 : r.get_int("sliding_window", 4096);
  c.sliding_layers.assign(static_cast<size_t>(c.num_hidden_layers), false);
  if (const nlohmann::json* types = r.get("layer_types")) {
    if (!types->is_array() || types->size() != static_cast<size_t>(c.num_hidden_layers))
      r.fail("layer_types", "expected an array of num_hidden_layers (" +
                                std::to_string(c.num_hidden_layers) + ") strings, got " +
                                quote_input(types->dump()));
    for (size_t i = 0; i < types->size(); ++i) {
      const nlohmann::json& t = (*types)[i];
      if (t == "sliding_attention")
        c.sliding_layers[i] = true;
      else if (t != "full_attention")
        r.fail("layer_types", "entry " + std::to_string(i) +
                                  ": expected \"sliding_attention\" or \"full_attention\", got " +
                                  quote_input(t.dump()));
    }
  } else {
    for (size_t i = 0; i < c.sliding_layers.size(); i += 2) c.sliding_layers[i] = true;
  }
  if (c.sliding_window == 0)
    for (bool s : c.sliding_layers)
      if (s) r.fail("sliding_window", "null, but layer_types has sliding_attention layers");
  return c;
}

Graph build_gemma(const GemmaConfig& c, const std::string& name) {
  const bool gemma2 = c.model_type == "gemma2";
  if (c.model_type != "gemma" && !gemma2)
    throw Error("gemma config for '" + name + "': model_type must be gemma or gemma2");
  check_decoder_sizes(
      "gemma", name,
      {c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
       c.num_key_value_heads, c.vocab_size, c.max_position_embeddings, c.head_dim});
  if (gemma2 && c.sliding_layers.size() != static_cast<size_t>(c.num_hidden_layers))
    throw Error("gemma config for '" + name + "': one sliding_layers entry per layer expected");
  if (c.hidden_act != "gelu" && c.hidden_act != "gelu_pytorch_tanh")
    throw Error("gemma config for '" + name + "': unsupported activation '" + c.hidden_act + "'");
  const std::string P = gemma2 ? "Gemma2" : "Gemma";
  const int64_t C = c.hidden_size, F = c.intermediate_size, D = c.head_dim;
  const std::string gate_act = c.hidden_act == "gelu" ? "gelu" : "gelu_tanh";

  const double scalar =
      gemma2 && c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : static_cast<double>(D);
  OpAttrs attn_attrs = rope_attention_attrs(c.rope_theta, scalar, c.rope_scaling);
  if (gemma2 && c.attn_logit_softcapping > 0) attn_attrs.softcap = c.attn_logit_softcapping;
  const SelfAttentionShape attn_shape{C, c.num_attention_heads, c.num_key_value_heads,
                                      D, c.attention_bias,      c.attention_bias};

  DecoderSkeleton skeleton = skeleton_of(c, name, c.model_type, P);
  skeleton.rms_weight_offset = 1.0;  // (1 + weight)

  DecoderHooks hooks;
  hooks.after_embedding = [&](GraphBuilder& gb, int model, int x) {
    return gb.scale(model, "normalizer", x, std::sqrt(static_cast<double>(C)));
  };
  hooks.layer = [&](GraphBuilder& gb, int layer, int64_t i, int x) {
    auto norm = [&](const char* local, int in) {
      return decoder_norm(gb, skeleton, layer, local, in);
    };
    const int a = norm("input_layernorm", x);
    const int attn = gb.add_module(layer, "self_attn", P + "Attention");
    OpAttrs layer_attrs = attn_attrs;
    if (gemma2 && c.sliding_layers[static_cast<size_t>(i)])
      layer_attrs.sliding_window = c.sliding_window;
    int attn_out = self_attention(gb, attn, a, attn_shape, layer_attrs);
    if (gemma2) attn_out = norm("post_attention_layernorm", attn_out);
    x = gb.residual(layer, "residual_1", x, attn_out);
    const int b = norm(gemma2 ? "pre_feedforward_layernorm" : "post_attention_layernorm", x);
    const int mlp = gb.add_module(layer, "mlp", P + "MLP");
    const int gate = linear_module(gb, mlp, "gate_proj", b, C, F, false);
    const int up = linear_module(gb, mlp, "up_proj", b, C, F, false);
    const int s = gb.swiglu(mlp, gate, up, gate_act);
    int mlp_out = linear_module(gb, mlp, "down_proj", s, F, C, false);
    if (gemma2) mlp_out = norm("post_feedforward_layernorm", mlp_out);
    return gb.residual(layer, "residual_2", x, mlp_out);
  };
  if (gemma2 && c.final_logit_softcapping > 0)
    hooks.logits = [&](GraphBuilder& gb, int root, int logits) {
      return gb.softcap(root, "final_logit_softcapping", logits, c.final_logit_softcapping);
    };
  return build_decoder(skeleton, hooks);
}

}  // namespace shardscope::plan
