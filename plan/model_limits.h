// Limits on the sizes a Hugging Face config.json may ask for, checked by
// HfConfigReader as each key is read, before any graph is built: a small file
// with "num_hidden_layers": 10000000 would otherwise build a graph until
// memory runs out. Each limit is far above every published model and is
// derived from what the graph, the step schedule and int64 element counts
// hold (docs/models.md, "Limits").
#pragma once

#include <cstdint>
#include <string_view>

namespace shardscope::plan {

struct SizeLimit {
  int64_t max = 0;
  const char* why = "";  // the reason, quoted in the error after the limit
};

// The limit of a config.json size key (num_hidden_layers, n_layer,
// num_local_experts, num_experts, num_experts_per_tok, num_attention_heads,
// n_head, num_key_value_heads, head_dim, hidden_size, n_embd,
// word_embed_proj_dim, intermediate_size, n_inner, ffn_dim,
// moe_intermediate_size, shared_expert_intermediate_size, vocab_size,
// max_position_embeddings, n_positions, n_ctx); nullptr for any other key.
const SizeLimit* hf_size_limit(std::string_view key);

constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxExperts = 4096;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxHidden = int64_t{1} << 17;        // 131,072
constexpr int64_t kMaxIntermediate = int64_t{1} << 20;  // 1,048,576
constexpr int64_t kMaxVocab = int64_t{1} << 21;         // 2,097,152
constexpr int64_t kMaxPositions = int64_t{1} << 24;     // 16,777,216
// num_attention_heads x head_dim: the width of q_proj's output.
constexpr int64_t kMaxAttentionWidth = int64_t{1} << 20;
// Graph ops of one model: the layers' ops (with experts, five per expert and
// layer) may not exceed this, so that one micro-step's schedule (at most 4
// schedule ops per graph op) stays a fifth of kMaxScheduleOps and the graph
// itself within about 1 GiB (docs/models.md, "Limits").
constexpr int64_t kMaxGraphOps = 250'000;

}  // namespace shardscope::plan
