// GPT-2 (Hugging Face GPT2LMHeadModel), module for module:
//   ""                           GPT2LMHeadModel
//   transformer                  GPT2Model
//   transformer.wte / .wpe       Embedding [V, C] / [n_positions, C]
//   transformer.h                ModuleList
//   transformer.h.<i>            GPT2Block: ln_1 LayerNorm, attn GPT2Attention
//                                (c_attn Conv1D C->3C, c_proj Conv1D C->C),
//                                ln_2 LayerNorm, mlp GPT2MLP (c_fc Conv1D C->4C,
//                                act, c_proj Conv1D 4C->C)
//   transformer.ln_f             LayerNorm
//   lm_head                      Linear C->V, weight tied to transformer.wte.weight
// Conv1D weights are [in, out]. Ops per block, in order: ln_1, c_attn,
// attention (packed qkv), c_proj, residual_1, ln_2, c_fc, act (gelu), c_proj,
// residual_2.
#include "plan/models_gpt2.h"

#include <cmath>

#include "plan/error.h"
#include "plan/graph_builder.h"
#include "plan/hf_config.h"

namespace shardscope::plan {

namespace {

struct Activation {
  const char* hf_name;
  const char* class_name;   // transformers.activations.ACT2CLS
  const char* approximate;  // gelu attr; nullptr for relu
  // Tensors of the input's size that autograd saves besides the input when
  // the activation is written out in Python (transformers 4.57
  // activations.py): NewGELUActivation
  //   0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3))))
  // saves x (pow), tanh's result, 0.5 * x and 1 + tanh (the last product);
  // FastGELUActivation
  //   0.5 * x * (1 + tanh(x * 0.7978845608 * (1 + 0.044715 * x * x)))
  // saves x, 0.044715 * x, x * 0.79788, 1 + 0.044715 x^2, tanh's result,
  // 0.5 * x and 1 + tanh. F.gelu (fused) saves x only.
  int unfused_saved;
  // Tensors of the input's size that the expression's backward holds at
  // once besides the input's gradient and the output's (the op's
  // operands). MemTracker on CPU, torch 2.9.1, with the output's gradient
  // held by the caller: gelu_new's backward peaks 3 input sizes above its
  // forward's live set, gelu_fast's 2, F.gelu's and SiLU's 1 (the input's
  // gradient). In a model the first node of the chain releases the
  // output's gradient, which the op here keeps to its end: one less.
  int unfused_bwd_temps;
};

const Activation kActivations[] = {
    {"gelu_new", "NewGELUActivation", "tanh", 3, 1},
    {"gelu_pytorch_tanh", "PytorchGELUTanh", "tanh", 0, 0},
    {"gelu_fast", "FastGELUActivation", "tanh", 6, 0},
    {"gelu", "GELUActivation", "none", 0, 0},
    {"relu", "ReLU", nullptr, 0, 0},
};

const Activation* find_activation(const std::string& name) {
  for (const Activation& a : kActivations)
    if (name == a.hf_name) return &a;
  return nullptr;
}

}  // namespace

Gpt2Config gpt2_config_from_hf(const nlohmann::json& config, const std::string& source) {
  HfConfigReader r(config, source);
  Gpt2Config c;
  c.n_layer = r.require_int("n_layer");
  c.n_embd = r.require_int("n_embd");
  c.n_head = r.require_int("n_head");
  c.vocab_size = r.require_int("vocab_size");
  // n_ctx is the older name of n_positions.
  c.n_positions = r.has("n_positions") ? r.require_int("n_positions") : r.require_int("n_ctx");
  c.n_inner = r.get_int("n_inner", 0);
  c.layer_norm_epsilon = r.get_double("layer_norm_epsilon", c.layer_norm_epsilon);
  c.activation = r.get_string("activation_function", c.activation);
  if (!find_activation(c.activation))
    r.fail("activation_function", "unsupported activation '" + c.activation +
                                      "' (supported: gelu_new, gelu_pytorch_tanh, gelu_fast, "
                                      "gelu, relu)");
  c.scale_attn_weights = r.get_bool("scale_attn_weights", true);
  c.scale_attn_by_inverse_layer_idx = r.get_bool("scale_attn_by_inverse_layer_idx", false);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", true);
  // reorder_and_upcast_attn only changes numerics (fp32 softmax): accepted.
  if (r.get_bool("add_cross_attention", false))
    r.fail("add_cross_attention", "cross-attention (encoder-decoder GPT-2) is not supported");
  r.check_divisible("n_embd", c.n_embd, "n_head", c.n_head);
  return c;
}

Graph build_gpt2(const Gpt2Config& c, const std::string& name) {
  if (c.n_layer < 1 || c.n_embd < 1 || c.n_head < 1 || c.vocab_size < 1 || c.n_positions < 1 ||
      c.n_embd % c.n_head != 0 || c.n_inner < 0)
    throw Error("gpt2 config for '" + name +
                "': sizes must be positive and n_embd divisible by n_head");
  const Activation* act = find_activation(c.activation);
  if (!act)
    throw Error("gpt2 config for '" + name + "': unsupported activation '" + c.activation + "'");
  const int64_t C = c.n_embd, V = c.vocab_size;
  const int64_t inner = c.n_inner > 0 ? c.n_inner : 4 * C;
  const int64_t head_dim = C / c.n_head;
  const double eps = c.layer_norm_epsilon;

  GraphBuilder gb(name, "gpt2", c.n_positions, V);
  const int ids = gb.add_input("input_ids", {dim_b(), dim_t()}, DType::i64);
  const int labels = gb.add_input("labels", {dim_b(), dim_t()}, DType::i64);

  const int root = gb.add_module(-1, "", "GPT2LMHeadModel");
  const int transformer = gb.add_module(root, "transformer", "GPT2Model");
  const int wte = gb.add_module(transformer, "wte", "Embedding");
  const int tok = gb.embedding(wte, ids, V, C);
  const int wte_weight = gb.graph().find_param("transformer.wte.weight");
  // Each GPT2Attention registers `bias`, tril(ones(n_positions,
  // n_positions)) as bool (transformers 4.57), whatever the attention
  // implementation: n_positions^2 bytes per block, on every rank.
  const int pos =
      gb.position_embedding(gb.add_module(transformer, "wpe", "Embedding"), c.n_positions, C,
                            c.n_layer * c.n_positions * c.n_positions);
  int x = gb.residual(transformer, "embed_add", tok, pos);  // [B, T, C]

  const int h = gb.add_module(transformer, "h", "ModuleList", true);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const int block = gb.add_module(h, std::to_string(i), "GPT2Block");
    const int ln_1 = gb.layernorm(gb.add_module(block, "ln_1", "LayerNorm"), x, C, eps);
    const int attn = gb.add_module(block, "attn", "GPT2Attention");
    const int qkv = gb.linear(gb.add_module(attn, "c_attn", "Conv1D"), ln_1, C, 3 * C, true,
                              WeightLayout::in_out);
    double scale = c.scale_attn_weights ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : 1.0;
    if (c.scale_attn_by_inverse_layer_idx) scale /= static_cast<double>(i + 1);
    OpAttrs attn_attrs;
    attn_attrs.rope = false;
    attn_attrs.scale = scale;
    const int y = gb.attention(attn, {qkv}, c.n_head, c.n_head, head_dim, attn_attrs);
    const int attn_out =
        gb.linear(gb.add_module(attn, "c_proj", "Conv1D"), y, C, C, true, WeightLayout::in_out);
    x = gb.residual(block, "residual_1", x, attn_out);

    const int ln_2 = gb.layernorm(gb.add_module(block, "ln_2", "LayerNorm"), x, C, eps);
    const int mlp = gb.add_module(block, "mlp", "GPT2MLP");
    const int fc =
        gb.linear(gb.add_module(mlp, "c_fc", "Conv1D"), ln_2, C, inner, true, WeightLayout::in_out);
    const int act_module = gb.add_module(mlp, "act", act->class_name);
    const int a = act->approximate ? gb.gelu(act_module, fc, act->approximate, act->unfused_saved,
                                             act->unfused_bwd_temps)
                                   : gb.relu(act_module, fc);
    const int mlp_out =
        gb.linear(gb.add_module(mlp, "c_proj", "Conv1D"), a, inner, C, true, WeightLayout::in_out);
    x = gb.residual(block, "residual_2", x, mlp_out);
  }
  x = gb.layernorm(gb.add_module(transformer, "ln_f", "LayerNorm"), x, C, eps);
  const int logits = gb.linear(gb.add_module(root, "lm_head", "Linear"), x, C, V, false,
                               WeightLayout::out_in, c.tie_word_embeddings ? wte_weight : -1);
  return gb.finish(gb.cross_entropy(root, logits, labels, V));
}

}  // namespace shardscope::plan
