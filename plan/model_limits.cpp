#include "plan/model_limits.h"

namespace shardscope::plan {

namespace {

constexpr const char* kLayersWhy =
    "published models have at most a few hundred layers (Llama 3.1 405B: 126); each layer adds "
    "graph ops and schedule ops to plan and simulate";
constexpr const char* kExpertsWhy =
    "published mixture-of-experts models route among at most 384 experts (Kimi K2); each expert "
    "adds five graph ops per layer";
constexpr const char* kHeadsWhy = "published models have at most 128 attention heads";
constexpr const char* kHeadDimWhy = "published models use head_dim 64 to 256";
constexpr const char* kHiddenWhy =
    "published models have hidden sizes up to 25,600; larger sizes make parameter and byte "
    "counts approach int64's range";
constexpr const char* kIntermediateWhy =
    "published models have MLP widths up to 73,728; larger sizes make parameter and byte counts "
    "approach int64's range";
constexpr const char* kVocabWhy =
    "published vocabularies have at most about 1M entries; larger ones make the logits' element "
    "counts approach int64's range";
constexpr const char* kPositionsWhy =
    "published contexts reach 10M tokens (Llama 4 Scout); the sequence length is bounded by it";

struct Entry {
  std::string_view key;
  SizeLimit limit;
};

constexpr Entry kLimits[] = {
    {"num_hidden_layers", {kMaxLayers, kLayersWhy}},
    {"n_layer", {kMaxLayers, kLayersWhy}},
    {"num_local_experts", {kMaxExperts, kExpertsWhy}},
    {"num_experts", {kMaxExperts, kExpertsWhy}},
    {"num_experts_per_tok", {kMaxExperts, kExpertsWhy}},
    {"num_attention_heads", {kMaxHeads, kHeadsWhy}},
    {"n_head", {kMaxHeads, kHeadsWhy}},
    {"num_key_value_heads", {kMaxHeads, kHeadsWhy}},
    {"head_dim", {kMaxHeadDim, kHeadDimWhy}},
    {"hidden_size", {kMaxHidden, kHiddenWhy}},
    {"n_embd", {kMaxHidden, kHiddenWhy}},
    {"word_embed_proj_dim", {kMaxHidden, kHiddenWhy}},
    {"intermediate_size", {kMaxIntermediate, kIntermediateWhy}},
    {"n_inner", {kMaxIntermediate, kIntermediateWhy}},
    {"ffn_dim", {kMaxIntermediate, kIntermediateWhy}},
    {"moe_intermediate_size", {kMaxIntermediate, kIntermediateWhy}},
    {"shared_expert_intermediate_size", {kMaxIntermediate, kIntermediateWhy}},
    {"vocab_size", {kMaxVocab, kVocabWhy}},
    {"max_position_embeddings", {kMaxPositions, kPositionsWhy}},
    {"n_positions", {kMaxPositions, kPositionsWhy}},
    {"n_ctx", {kMaxPositions, kPositionsWhy}},
};

}  // namespace

const SizeLimit* hf_size_limit(std::string_view key) {
  for (const Entry& e : kLimits)
    if (e.key == key) return &e.limit;
  return nullptr;
}

}  // namespace shardscope::plan
