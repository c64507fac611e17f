#include "plan/decoder_skeleton.h"

#include <cmath>
#include <string>

#include "plan/error.h"

namespace shardscope::plan {

Graph build_decoder(const DecoderSkeleton& s, const DecoderHooks& hooks) {
  if (!hooks.layer) throw Error("decoder '" + s.model_name + "': no layer builder");
  const int64_t C = s.hidden_size, V = s.vocab_size;
  const std::string& P = s.class_prefix;
  GraphBuilder gb(s.model_name, s.family, s.max_position_embeddings, V);
  const int ids = gb.add_input("input_ids", {dim_b(), dim_t()}, DType::i64);
  const int labels = gb.add_input("labels", {dim_b(), dim_t()}, DType::i64);

  const int root = gb.add_module(-1, "", P + "ForCausalLM");
  const int model = gb.add_module(root, "model", P + "Model");
  int x = gb.embedding(gb.add_module(model, "embed_tokens", "Embedding"), ids, V, C);
  const int embed_weight = gb.graph().find_param("model.embed_tokens.weight");
  if (hooks.after_embedding) x = hooks.after_embedding(gb, model, x);

  const int layers = gb.add_module(model, "layers", "ModuleList", true);
  for (int64_t i = 0; i < s.num_hidden_layers; ++i)
    x = hooks.layer(gb, gb.add_module(layers, std::to_string(i), P + "DecoderLayer"), i, x);
  x = decoder_norm(gb, s, model, "norm", x);
  int logits = gb.linear(gb.add_module(root, "lm_head", "Linear"), x, C, V, false,
                         WeightLayout::out_in, s.tie_word_embeddings ? embed_weight : -1);
  if (hooks.logits) logits = hooks.logits(gb, root, logits);
  return gb.finish(gb.cross_entropy(root, logits, labels, V));
}

int decoder_norm(GraphBuilder& gb, const DecoderSkeleton& s, int parent, const char* local, int x) {
  return gb.rmsnorm(gb.add_module(parent, local, s.class_prefix + "RMSNorm"), x, s.hidden_size,
                    s.rms_norm_eps, s.rms_weight_offset);
}

int linear_module(GraphBuilder& gb, int parent, const char* local, int x, int64_t in, int64_t out,
                  bool bias) {
  return gb.linear(gb.add_module(parent, local, "Linear"), x, in, out, bias, WeightLayout::out_in);
}

int self_attention(GraphBuilder& gb, int attn, int x, const SelfAttentionShape& a,
                   const OpAttrs& attrs, const HeadNorm& head_norm) {
  const int64_t C = a.hidden_size, H = a.heads, Hkv = a.kv_heads, D = a.head_dim;
  int q = linear_module(gb, attn, "q_proj", x, C, H * D, a.qkv_bias);
  if (head_norm) q = head_norm("q_norm", q, H);
  int k = linear_module(gb, attn, "k_proj", x, C, Hkv * D, a.qkv_bias);
  if (head_norm) k = head_norm("k_norm", k, Hkv);
  const int v = linear_module(gb, attn, "v_proj", x, C, Hkv * D, a.qkv_bias);
  const int y = gb.attention(attn, {q, k, v}, H, Hkv, D, attrs);
  return linear_module(gb, attn, "o_proj", y, H * D, C, a.o_bias);
}

OpAttrs rope_attention_attrs(double rope_theta, double scale_dim,
                             const nlohmann::json& rope_scaling, int64_t sliding_window) {
  OpAttrs attrs;
  attrs.rope = true;
  attrs.rope_theta = rope_theta;
  attrs.scale = 1.0 / std::sqrt(scale_dim);
  if (!rope_scaling.is_null()) attrs.rope_scaling = rope_scaling.dump();
  if (sliding_window > 0) attrs.sliding_window = sliding_window;
  return attrs;
}

void check_decoder_sizes(const char* family, const std::string& name, const DecoderSizes& s) {
  if (s.hidden_size < 1 || s.intermediate_size < 1 || s.num_hidden_layers < 1 ||
      s.num_attention_heads < 1 || s.num_key_value_heads < 1 || s.vocab_size < 1 ||
      s.max_position_embeddings < 1 || s.head_dim < 1 ||
      s.num_attention_heads % s.num_key_value_heads != 0)
    throw Error(std::string(family) + " config for '" + name +
                "': sizes must be positive and num_attention_heads a multiple of "
                "num_key_value_heads");
}

}  // namespace shardscope::plan
