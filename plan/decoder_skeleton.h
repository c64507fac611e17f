// The decoder skeleton shared by the RoPE decoder families (Llama, Mistral,
// Qwen2, Qwen3 in models_llama.cpp; Gemma, Gemma 2; Phi-3; Mixtral,
// Qwen2-MoE), module for module (P = the family's class prefix,
// C = hidden_size, V = vocab_size):
//   ""                      PForCausalLM
//   model                   PModel
//   model.embed_tokens      Embedding [V, C], then DecoderHooks::after_embedding
//   model.layers            ModuleList
//   model.layers.<i>        PDecoderLayer: DecoderHooks::layer
//   model.norm              PRMSNorm
//   lm_head                 Linear C->V, no bias (tied to model.embed_tokens.weight
//                           when tie_word_embeddings), then DecoderHooks::logits
// then the loss: cross entropy of the logits against labels. Inputs
// input_ids and labels, [B, T] i64. Modules, tensors and ops are emitted in
// exactly this order, so a family's graph is what its own code wrote before.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/graph.h"
#include "plan/graph_builder.h"

namespace shardscope::plan {

struct DecoderSkeleton {
  std::string model_name;    // Graph::model_name (the preset or the config file)
  std::string family;        // Graph::family: "llama", "qwen2", "gemma2", "phi3", ...
  std::string class_prefix;  // P: "Llama", "Gemma2", "Mixtral", ...
  int64_t hidden_size = 0;   // C
  int64_t vocab_size = 0;    // V
  int64_t num_hidden_layers = 0;
  int64_t max_position_embeddings = 0;  // Graph::max_seq_len
  double rms_norm_eps = 1e-6;
  double rms_weight_offset = 0.0;  // PRMSNorm's x * rstd * (offset + weight): Gemma 1, else 0
  bool tie_word_embeddings = false;
};

// The skeleton's fields every decoder family's config names the same way
// (hidden_size, vocab_size, num_hidden_layers, max_position_embeddings,
// rms_norm_eps, tie_word_embeddings); the family sets rms_weight_offset itself
// where it differs.
template <class Config>
DecoderSkeleton skeleton_of(const Config& c, const std::string& model_name,
                            const std::string& family, const std::string& class_prefix) {
  DecoderSkeleton s;
  s.model_name = model_name;
  s.family = family;
  s.class_prefix = class_prefix;
  s.hidden_size = c.hidden_size;
  s.vocab_size = c.vocab_size;
  s.num_hidden_layers = c.num_hidden_layers;
  s.max_position_embeddings = c.max_position_embeddings;
  s.rms_norm_eps = c.rms_norm_eps;
  s.tie_word_embeddings = c.tie_word_embeddings;
  return s;
}

struct DecoderHooks {
  // Layer `index`: `layer` is model.layers.<index> (PDecoderLayer), x [B, T, C]
  // its input; returns its output [B, T, C]. Required.
  std::function<int(GraphBuilder& gb, int layer, int64_t index, int x)> layer;
  // Optional: the embedding output [B, T, C] -> [B, T, C] under `model`
  // (Gemma's normalizer).
  std::function<int(GraphBuilder& gb, int model, int x)> after_embedding;
  // Optional: the logits [B, T, V] -> [B, T, V] under the root (Gemma 2's
  // final soft-capping).
  std::function<int(GraphBuilder& gb, int root, int logits)> logits;
};

// Builds the skeleton above around the family's layers; returns the finished
// graph (GraphBuilder::finish validates it).
Graph build_decoder(const DecoderSkeleton& skeleton, const DecoderHooks& hooks);

// The family's RMSNorm: module `local` (class PRMSNorm) under `parent`, over
// the C elements of x's last dim, with the skeleton's eps and weight offset.
int decoder_norm(GraphBuilder& gb, const DecoderSkeleton& skeleton, int parent, const char* local,
                 int x);

// An nn.Linear module `local` under `parent`: x [.., in] -> [.., out],
// weight [out, in] (and bias [out]).
int linear_module(GraphBuilder& gb, int parent, const char* local, int x, int64_t in, int64_t out,
                  bool bias);

// A RoPE decoder's self-attention under `attn` (PAttention): q_proj C->H*D,
// k_proj and v_proj C->Hkv*D (bias qkv_bias), the attention op, o_proj
// H*D->C (bias o_bias), in that module order. `head_norm`, when set, is
// applied to q_proj's output (local "q_norm", H heads) right after q_proj
// and to k_proj's ("k_norm", Hkv heads) right after k_proj (Qwen3). Returns
// o_proj's output.
struct SelfAttentionShape {
  int64_t hidden_size = 0;  // C
  int64_t heads = 0;        // H
  int64_t kv_heads = 0;     // Hkv
  int64_t head_dim = 0;     // D
  bool qkv_bias = false;
  bool o_bias = false;
};
using HeadNorm = std::function<int(const char* local, int x, int64_t heads)>;
int self_attention(GraphBuilder& gb, int attn, int x, const SelfAttentionShape& shape,
                   const OpAttrs& attrs, const HeadNorm& head_norm = nullptr);

// The attention attributes of a RoPE decoder: rope on, base rope_theta,
// scale scale_dim^-0.5 (scale_dim: head_dim, or Gemma 2's
// query_pre_attn_scalar), rope_scaling recorded as compact JSON unless null,
// sliding_window (tokens) when > 0.
OpAttrs rope_attention_attrs(double rope_theta, double scale_dim,
                             const nlohmann::json& rope_scaling, int64_t sliding_window = 0);

// The sizes a RoPE decoder builder checks before building (head_dim: the
// effective one, derived or given).
struct DecoderSizes {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  int64_t head_dim = 0;
};
// Throws Error "<family> config for '<name>': sizes must be positive and
// num_attention_heads a multiple of num_key_value_heads" unless every size is
// >= 1 and num_key_value_heads divides num_attention_heads.
void check_decoder_sizes(const char* family, const std::string& name, const DecoderSizes& sizes);

}  // namespace shardscope::plan
