// Mixture of experts: Mixtral and Qwen2-MoE (model_type "mixtral",
// "qwen2_moe"): the config and its builder (plan/models_moe.cpp). Graph
// conventions and cost formulas are in plan/graph_builder.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/graph.h"

namespace shardscope::plan {

// Hugging Face MixtralConfig / Qwen2MoeConfig (MixtralForCausalLM,
// Qwen2MoeForCausalLM), see plan/models_moe.cpp.
struct MoeConfig {
  std::string model_type = "mixtral";  // "mixtral" | "qwen2_moe"
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 14336;  // Mixtral: each expert's; Qwen2-MoE: the dense layers'
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 8;
  int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads
  int64_t vocab_size = 32000;
  int64_t max_position_embeddings = 131072;
  double rms_norm_eps = 1e-5;
  double rope_theta = 1e6;
  nlohmann::json rope_scaling = nullptr;  // recorded in the attention attrs
  int64_t sliding_window = 0;             // Mixtral, every layer; 0 = none
  std::string hidden_act = "silu";        // silu | gelu | gelu_pytorch_tanh
  bool tie_word_embeddings = false;
  bool qkv_bias = false;              // Qwen2-MoE: bias on q/k/v_proj (default true)
  int64_t num_experts = 8;            // num_local_experts (Mixtral) / num_experts
  int64_t top_k = 2;                  // num_experts_per_tok
  int64_t moe_intermediate_size = 0;  // Qwen2-MoE: each routed expert's (Mixtral: intermediate)
  int64_t shared_expert_intermediate_size = 0;  // Qwen2-MoE's shared expert; 0 = none
  bool norm_topk_prob = true;                   // Mixtral always; Qwen2-MoE's key (default false)
  // Per layer: routed experts (true) or a dense MLP of intermediate_size
  // (Qwen2-MoE's decoder_sparse_step and mlp_only_layers). Empty: all routed.
  std::vector<bool> sparse_layers;
};

Graph build_moe(const MoeConfig& config, const std::string& name);
// The number of graph ops build_moe makes from `config` (sizes within
// hf_size_limit): what moe_config_from_hf checks against kMaxGraphOps.
int64_t moe_graph_ops(const MoeConfig& config);
MoeConfig moe_config_from_hf(const nlohmann::json& config, const std::string& source);

}  // namespace shardscope::plan
