// OPT (Hugging Face OPTForCausalLM, model_type "opt"): the config and its
// builder (plan/models_opt.cpp). Graph conventions and cost formulas are in
// plan/graph_builder.h.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/graph.h"

namespace shardscope::plan {

// Hugging Face OPTConfig (transformers 4.57); defaults are its defaults.
struct OptConfig {
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t ffn_dim = 3072;
  int64_t vocab_size = 50272;
  int64_t max_position_embeddings = 2048;  // embed_positions has 2 more rows
  int64_t word_embed_proj_dim = 0;         // 0: hidden_size (no project_in/out)
  bool do_layer_norm_before = true;        // false: post-LN (opt-350m)
  bool remove_final_layer_norm = false;    // _remove_final_layer_norm
  bool enable_bias = true;                 // bias on q/k/v/out_proj, fc1, fc2
  bool tie_word_embeddings = true;         // lm_head reads embed_tokens.weight
  int64_t pad_token_id = 1;  // embed_tokens' padding_idx: that row gets no gradient; -1: none
  std::string activation_function = "relu";  // relu | gelu
};

OptConfig opt_config_from_hf(const nlohmann::json& config, const std::string& source);
Graph build_opt(const OptConfig& config, const std::string& name);

}  // namespace shardscope::plan
