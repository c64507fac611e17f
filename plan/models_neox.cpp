// GPT-NeoX / Pythia (Hugging Face GPTNeoXForCausalLM, transformers 4.57),
// module for module:
//   ""                               GPTNeoXForCausalLM
//   gpt_neox                         GPTNeoXModel
//   gpt_neox.embed_in                Embedding [V, C]
//   gpt_neox.layers                  ModuleList
//   gpt_neox.layers.<i>              GPTNeoXLayer: input_layernorm LayerNorm,
//                                    attention GPTNeoXAttention (query_key_value
//                                    Linear C->3C, dense Linear C->C, both with
//                                    bias unless attention_bias is false),
//                                    post_attention_layernorm LayerNorm, mlp
//                                    GPTNeoXMLP (dense_h_to_4h Linear C->F, act,
//                                    dense_4h_to_h Linear F->C, with bias)
//   gpt_neox.final_layer_norm        LayerNorm
//   embed_out                        Linear C->V, no bias (untied unless
//                                    tie_word_embeddings)
// query_key_value's output is viewed [B, T, H, 3*D] and chunked: q, k and v are
// interleaved per head ([H, 3, D], attention attr qkv_per_head). RoPE rotates
// only the first rotary_ndims = int(D * rotary_pct) elements of each head
// (attr rotary_dim), base rotary_emb_base. Ops per layer:
//   parallel (use_parallel_residual, every Pythia and GPT-NeoX-20B):
//     input_layernorm(x), query_key_value, attention, dense,
//     post_attention_layernorm(x), dense_h_to_4h, act, dense_4h_to_h,
//     residual_1 = mlp + attn, residual_2 = residual_1 + x
//     (HF: mlp_output + attn_output + hidden_states)
//   sequential: input_layernorm(x), query_key_value, attention, dense,
//     residual_1 = attn + x, post_attention_layernorm, dense_h_to_4h, act,
//     dense_4h_to_h, residual_2 = mlp + residual_1
// Dropout (attention_dropout, hidden_dropout) is not modeled.
#include "plan/models_neox.h"

#include "plan/decoder_skeleton.h"
#include "plan/error.h"
#include "plan/graph_builder.h"
#include "plan/hf_config.h"
#include "plan/json_input.h"

namespace shardscope::plan {

namespace {

struct NeoxActivation {
  const char* hf_name;
  const char* class_name;   // transformers.activations.ACT2CLS
  const char* approximate;  // gelu attr; nullptr for relu
};

// F.gelu and ReLU are fused: they save their input (gelu) or output (relu) only.
const NeoxActivation kNeoxActivations[] = {
    {"gelu", "GELUActivation", "none"},
    {"gelu_pytorch_tanh", "GELUTanh", "tanh"},
    {"relu", "ReLU", nullptr},
};

const NeoxActivation* find_neox_activation(const std::string& name) {
  for (const NeoxActivation& a : kNeoxActivations)
    if (name == a.hf_name) return &a;
  return nullptr;
}

}  // namespace

int64_t neox_rotary_ndims(const NeoxConfig& c) {
  const int64_t head_dim = c.hidden_size / c.num_attention_heads;
  // Python's int() truncates toward zero; rotary_pct > 0.
  return static_cast<int64_t>(static_cast<double>(head_dim) * c.rotary_pct);
}

NeoxConfig neox_config_from_hf(const nlohmann::json& config, const std::string& source) {
  HfConfigReader r(config, source);
  NeoxConfig c;
  const std::string type = r.get_string("model_type", "gpt_neox");
  if (type != "gpt_neox")
    r.fail("model_type", "expected \"gpt_neox\", got \"" + quote_input(type) + "\"");
  c.hidden_size = r.require_int("hidden_size");
  c.num_hidden_layers = r.require_int("num_hidden_layers");
  c.num_attention_heads = r.require_int("num_attention_heads");
  c.intermediate_size = r.require_int("intermediate_size");
  c.vocab_size = r.require_int("vocab_size");
  c.max_position_embeddings = r.require_int("max_position_embeddings");
  r.check_divisible("hidden_size", c.hidden_size, "num_attention_heads", c.num_attention_heads);
  c.rotary_pct = r.get_double("rotary_pct", c.rotary_pct);
  if (c.rotary_pct > 1.0)
    r.fail("rotary_pct", "must be in (0, 1], got " + r.get("rotary_pct")->dump());
  c.rotary_emb_base = r.get_double("rotary_emb_base", c.rotary_emb_base);
  // GPTNeoXConfig sets partial_rotary_factor = rotary_pct and rope_theta =
  // rotary_emb_base whatever the file says: a different value there would be
  // silently ignored by transformers, so it is an error here.
  const std::pair<const char*, std::pair<const char*, double>> aliases[] = {
      {"partial_rotary_factor", {"rotary_pct", c.rotary_pct}},
      {"rope_theta", {"rotary_emb_base", c.rotary_emb_base}}};
  for (const auto& [alias, target] : aliases)
    if (r.has(alias) && r.get_double(alias, 1.0) != target.second)
      r.fail(alias, std::string("differs from ") + target.first + " (" +
                        nlohmann::json(target.second).dump() +
                        "), which GPTNeoXConfig uses in its place; set " + target.first);
  const int64_t head_dim = c.hidden_size / c.num_attention_heads;
  const int64_t rotary = neox_rotary_ndims(c);
  if (rotary < 2 || rotary % 2 != 0)
    r.fail("rotary_pct", "head_dim " + std::to_string(head_dim) + " * rotary_pct " +
                             nlohmann::json(c.rotary_pct).dump() + " gives " +
                             std::to_string(rotary) +
                             " rotary dims; an even number >= 2 is needed");
  if (const nlohmann::json* v = r.get("rope_scaling")) {
    if (!v->is_object()) r.fail("rope_scaling", "expected an object or null, got " + v->dump());
    c.rope_scaling = *v;  // changes no parameter; recorded for the attention op
  }
  c.layer_norm_eps = r.get_double("layer_norm_eps", c.layer_norm_eps);
  c.use_parallel_residual = r.get_bool("use_parallel_residual", c.use_parallel_residual);
  c.attention_bias = r.get_bool("attention_bias", c.attention_bias);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", c.tie_word_embeddings);
  c.hidden_act = r.get_string("hidden_act", c.hidden_act);
  if (!find_neox_activation(c.hidden_act))
    r.fail("hidden_act", "unsupported activation '" + quote_input(c.hidden_act) +
                             "' (supported: gelu, gelu_pytorch_tanh, relu)");
  // attention_dropout and hidden_dropout are dropout, which is not modeled.
  return c;
}

Graph build_neox(const NeoxConfig& c, const std::string& name) {
  if (c.hidden_size < 1 || c.num_hidden_layers < 1 || c.num_attention_heads < 1 ||
      c.intermediate_size < 1 || c.vocab_size < 1 || c.max_position_embeddings < 1 ||
      c.hidden_size % c.num_attention_heads != 0)
    throw Error("gpt_neox config for '" + name +
                "': sizes must be positive and hidden_size divisible by num_attention_heads");
  const NeoxActivation* act = find_neox_activation(c.hidden_act);
  if (!act)
    throw Error("gpt_neox config for '" + name + "': unsupported hidden_act '" + c.hidden_act +
                "'");
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t H = c.num_attention_heads, D = C / H;
  const int64_t rotary = neox_rotary_ndims(c);
  if (!(c.rotary_pct > 0.0 && c.rotary_pct <= 1.0) || rotary < 2 || rotary % 2 != 0)
    throw Error("gpt_neox config for '" + name + "': rotary_pct must give an even number >= 2 " +
                "of rotary dims, got " + std::to_string(rotary));
  const double eps = c.layer_norm_eps;

  // scale head_size ** -0.5
  OpAttrs attn_attrs =
      rope_attention_attrs(c.rotary_emb_base, static_cast<double>(D), c.rope_scaling);
  if (rotary != D) attn_attrs.rotary_dim = rotary;
  attn_attrs.qkv_per_head = true;

  GraphBuilder gb(name, "gpt_neox", c.max_position_embeddings, V);
  const int ids = gb.add_input("input_ids", {dim_b(), dim_t()}, DType::i64);
  const int labels = gb.add_input("labels", {dim_b(), dim_t()}, DType::i64);

  const int root = gb.add_module(-1, "", "GPTNeoXForCausalLM");
  const int model = gb.add_module(root, "gpt_neox", "GPTNeoXModel");
  int x = gb.embedding(gb.add_module(model, "embed_in", "Embedding"), ids, V, C);
  const int embed_weight = gb.graph().find_param("gpt_neox.embed_in.weight");

  const int layers = gb.add_module(model, "layers", "ModuleList", true);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const int layer = gb.add_module(layers, std::to_string(i), "GPTNeoXLayer");
    auto linear = [&](int parent, const char* local, int in_tensor, int64_t in, int64_t out,
                      bool bias) {
      return gb.linear(gb.add_module(parent, local, "Linear"), in_tensor, in, out, bias,
                       WeightLayout::out_in);
    };
    auto mlp_block = [&](int in_tensor) {
      const int mlp = gb.add_module(layer, "mlp", "GPTNeoXMLP");
      const int h = linear(mlp, "dense_h_to_4h", in_tensor, C, F, true);
      const int act_module = gb.add_module(mlp, "act", act->class_name);
      const int a =
          act->approximate ? gb.gelu(act_module, h, act->approximate) : gb.relu(act_module, h);
      return linear(mlp, "dense_4h_to_h", a, F, C, true);
    };

    const int ln1 = gb.layernorm(gb.add_module(layer, "input_layernorm", "LayerNorm"), x, C, eps);
    const int attn = gb.add_module(layer, "attention", "GPTNeoXAttention");
    const int qkv = linear(attn, "query_key_value", ln1, C, 3 * C, c.attention_bias);
    const int y = gb.attention(attn, {qkv}, H, H, D, attn_attrs);
    const int attn_out = linear(attn, "dense", y, C, C, c.attention_bias);
    const int post_ln = gb.add_module(layer, "post_attention_layernorm", "LayerNorm");
    if (c.use_parallel_residual) {
      const int mlp_out = mlp_block(gb.layernorm(post_ln, x, C, eps));
      const int sum = gb.residual(layer, "residual_1", mlp_out, attn_out);
      x = gb.residual(layer, "residual_2", sum, x);
    } else {
      const int h = gb.residual(layer, "residual_1", attn_out, x);
      const int mlp_out = mlp_block(gb.layernorm(post_ln, h, C, eps));
      x = gb.residual(layer, "residual_2", mlp_out, h);
    }
  }
  x = gb.layernorm(gb.add_module(model, "final_layer_norm", "LayerNorm"), x, C, eps);
  const int logits = gb.linear(gb.add_module(root, "embed_out", "Linear"), x, C, V, false,
                               WeightLayout::out_in, c.tie_word_embeddings ? embed_weight : -1);
  return gb.finish(gb.cross_entropy(root, logits, labels, V));
}

}  // namespace shardscope::plan
