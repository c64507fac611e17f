// OPT (Hugging Face OPTForCausalLM, transformers 4.57), module for module
// (P = word_embed_proj_dim, C = hidden_size, F = ffn_dim):
//   ""                                  OPTForCausalLM
//   model                               OPTModel
//   model.decoder                       OPTDecoder
//   model.decoder.embed_tokens          Embedding [V, P]
//   model.decoder.embed_positions       OPTLearnedPositionalEmbedding
//                                       [max_position_embeddings + 2, C]: rows
//                                       2 .. T+1 are read (offset 2)
//   model.decoder.project_in            Linear P->C, no bias (only when P != C)
//   model.decoder.layers                ModuleList
//   model.decoder.layers.<i>            OPTDecoderLayer: self_attn OPTAttention
//                                       (q_proj, k_proj, v_proj, out_proj Linear
//                                       C->C), self_attn_layer_norm LayerNorm,
//                                       fc1 Linear C->F, activation_fn, fc2
//                                       Linear F->C, final_layer_norm LayerNorm;
//                                       biases on the linears unless enable_bias
//                                       is false
//   model.decoder.final_layer_norm      LayerNorm (only when do_layer_norm_before
//                                       and not _remove_final_layer_norm)
//   model.decoder.project_out           Linear C->P, no bias (only when P != C)
//   lm_head                             Linear P->V, no bias, tied to
//                                       embed_tokens.weight (tie_word_embeddings)
// Ops: embed_tokens, embed_positions, project_in, embed_add (the [T, C]
// position rows broadcast over the batch), then per layer
//   pre-LN (do_layer_norm_before): self_attn_layer_norm, q/k/v_proj,
//     attention, out_proj, residual_1, final_layer_norm, fc1, act, fc2,
//     residual_2;
//   post-LN (opt-350m): q/k/v_proj, attention, out_proj, residual_1,
//     self_attn_layer_norm, fc1, act, fc2, residual_2, final_layer_norm;
// then final_layer_norm, project_out, lm_head, loss. OPTAttention multiplies
// q_proj's output by head_dim^-0.5 and runs SDPA with scale 1: the same math
// as the attention op's scale head_dim^-0.5, which the CPU engine also
// applies to q before the dot products. embed_tokens has padding_idx =
// pad_token_id (1 in every OPT config): ids equal to it add no gradient to
// that row. Dropout (dropout, attention_dropout) is not modeled.
#include "plan/models_opt.h"

#include <cmath>

#include "plan/error.h"
#include "plan/graph_builder.h"
#include "plan/hf_config.h"
#include "plan/json_input.h"

namespace shardscope::plan {

namespace {

constexpr int64_t kOptPositionOffset = 2;  // OPTLearnedPositionalEmbedding.offset

}  // namespace

OptConfig opt_config_from_hf(const nlohmann::json& config, const std::string& source) {
  HfConfigReader r(config, source);
  OptConfig c;
  const std::string type = r.get_string("model_type", "opt");
  if (type != "opt") r.fail("model_type", "expected \"opt\", got \"" + quote_input(type) + "\"");
  c.hidden_size = r.require_int("hidden_size");
  c.num_hidden_layers = r.require_int("num_hidden_layers");
  c.num_attention_heads = r.require_int("num_attention_heads");
  c.ffn_dim = r.require_int("ffn_dim");
  c.vocab_size = r.require_int("vocab_size");
  c.max_position_embeddings = r.require_int("max_position_embeddings");
  r.check_divisible("hidden_size", c.hidden_size, "num_attention_heads", c.num_attention_heads);
  c.word_embed_proj_dim = r.get_int("word_embed_proj_dim", c.hidden_size);
  c.do_layer_norm_before = r.get_bool("do_layer_norm_before", c.do_layer_norm_before);
  c.remove_final_layer_norm = r.get_bool("_remove_final_layer_norm", false);
  c.enable_bias = r.get_bool("enable_bias", c.enable_bias);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", c.tie_word_embeddings);
  // OPTConfig's default is 1; an explicit null means no padding row.
  if (config.contains("pad_token_id") && config.at("pad_token_id").is_null())
    c.pad_token_id = -1;
  else
    c.pad_token_id = r.get_int("pad_token_id", c.pad_token_id, 0);
  if (c.pad_token_id >= c.vocab_size)
    r.fail("pad_token_id", std::to_string(c.pad_token_id) + " is not a row of embed_tokens (" +
                               "vocab_size " + std::to_string(c.vocab_size) + ")");
  if (!r.get_bool("layer_norm_elementwise_affine", true))
    r.fail("layer_norm_elementwise_affine",
           "false (LayerNorms without weight and bias) is not supported; every published OPT "
           "config has true");
  if (const nlohmann::json* v = r.get("layerdrop")) {
    if (!v->is_number() || v->get<double>() != 0.0)
      r.fail("layerdrop", "only 0 is supported (LayerDrop skips random layers), got " + v->dump());
  }
  c.activation_function = r.get_string("activation_function", c.activation_function);
  if (c.activation_function != "relu" && c.activation_function != "gelu")
    r.fail("activation_function", "unsupported activation '" + quote_input(c.activation_function) +
                                      "' (supported: relu, gelu)");
  // dropout and attention_dropout are dropout, which is not modeled.
  return c;
}

Graph build_opt(const OptConfig& c, const std::string& name) {
  const int64_t P = c.word_embed_proj_dim > 0 ? c.word_embed_proj_dim : c.hidden_size;
  if (c.hidden_size < 1 || c.num_hidden_layers < 1 || c.num_attention_heads < 1 || c.ffn_dim < 1 ||
      c.vocab_size < 1 || c.max_position_embeddings < 1 ||
      c.hidden_size % c.num_attention_heads != 0)
    throw Error("opt config for '" + name +
                "': sizes must be positive and hidden_size divisible by num_attention_heads");
  if (c.activation_function != "relu" && c.activation_function != "gelu")
    throw Error("opt config for '" + name + "': unsupported activation_function '" +
                c.activation_function + "'");
  const int64_t C = c.hidden_size, F = c.ffn_dim, V = c.vocab_size;
  const int64_t H = c.num_attention_heads, D = C / H;
  const double eps = 1e-5;  // nn.LayerNorm's default: OPT passes no eps
  const bool pre_ln = c.do_layer_norm_before;

  OpAttrs attn_attrs;
  attn_attrs.rope = false;
  attn_attrs.scale = 1.0 / std::sqrt(static_cast<double>(D));  // head_dim ** -0.5 on q

  GraphBuilder gb(name, "opt", c.max_position_embeddings, V);
  const int ids = gb.add_input("input_ids", {dim_b(), dim_t()}, DType::i64);
  const int labels = gb.add_input("labels", {dim_b(), dim_t()}, DType::i64);

  const int root = gb.add_module(-1, "", "OPTForCausalLM");
  const int model = gb.add_module(root, "model", "OPTModel");
  const int decoder = gb.add_module(model, "decoder", "OPTDecoder");
  auto linear = [&](int parent, const char* local, int in_tensor, int64_t in, int64_t out,
                    bool bias) {
    return gb.linear(gb.add_module(parent, local, "Linear"), in_tensor, in, out, bias,
                     WeightLayout::out_in);
  };
  if (c.pad_token_id >= V)
    throw Error("opt config for '" + name + "': pad_token_id is not a row of embed_tokens");
  int tok =
      gb.embedding(gb.add_module(decoder, "embed_tokens", "Embedding"), ids, V, P, c.pad_token_id);
  const int embed_weight = gb.graph().find_param("model.decoder.embed_tokens.weight");
  const int pos = gb.position_embedding(
      gb.add_module(decoder, "embed_positions", "OPTLearnedPositionalEmbedding"),
      c.max_position_embeddings + kOptPositionOffset, C, 0, kOptPositionOffset);
  if (P != C) tok = linear(decoder, "project_in", tok, P, C, false);
  int x = gb.residual(decoder, "embed_add", tok, pos);  // [B, T, C]

  const int layers = gb.add_module(decoder, "layers", "ModuleList", true);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const int layer = gb.add_module(layers, std::to_string(i), "OPTDecoderLayer");
    auto norm = [&](const char* local, int in_tensor) {
      return gb.layernorm(gb.add_module(layer, local, "LayerNorm"), in_tensor, C, eps);
    };
    const int a = pre_ln ? norm("self_attn_layer_norm", x) : x;
    const int attn = gb.add_module(layer, "self_attn", "OPTAttention");
    const int q = linear(attn, "q_proj", a, C, C, c.enable_bias);
    const int k = linear(attn, "k_proj", a, C, C, c.enable_bias);
    const int v = linear(attn, "v_proj", a, C, C, c.enable_bias);
    const int y = gb.attention(attn, {q, k, v}, H, H, D, attn_attrs);
    const int attn_out = linear(attn, "out_proj", y, C, C, c.enable_bias);
    x = gb.residual(layer, "residual_1", x, attn_out);
    if (!pre_ln) x = norm("self_attn_layer_norm", x);

    const int b = pre_ln ? norm("final_layer_norm", x) : x;
    const int h = linear(layer, "fc1", b, C, F, c.enable_bias);
    const int act_module = gb.add_module(
        layer, "activation_fn", c.activation_function == "relu" ? "ReLU" : "GELUActivation");
    const int act =
        c.activation_function == "relu" ? gb.relu(act_module, h) : gb.gelu(act_module, h, "none");
    const int mlp_out = linear(layer, "fc2", act, F, C, c.enable_bias);
    x = gb.residual(layer, "residual_2", x, mlp_out);
    if (!pre_ln) x = norm("final_layer_norm", x);
  }
  if (pre_ln && !c.remove_final_layer_norm)
    x = gb.layernorm(gb.add_module(decoder, "final_layer_norm", "LayerNorm"), x, C, eps);
  if (P != C) x = linear(decoder, "project_out", x, C, P, false);
  const int logits = gb.linear(gb.add_module(root, "lm_head", "Linear"), x, P, V, false,
                               WeightLayout::out_in, c.tie_word_embeddings ? embed_weight : -1);
  return gb.finish(gb.cross_entropy(root, logits, labels, V));
}

}  // namespace shardscope::plan
