// GPT-2 (Hugging Face GPT2LMHeadModel, model_type "gpt2"): the config and its
// builder (plan/models_gpt2.cpp). Graph conventions and cost formulas are in
// plan/graph_builder.h.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/graph.h"

namespace shardscope::plan {

// Hugging Face GPT2Config (GPT2LMHeadModel).
struct Gpt2Config {
  int64_t n_layer = 12;
  int64_t n_embd = 768;
  int64_t n_head = 12;
  int64_t n_positions = 1024;
  int64_t vocab_size = 50257;
  int64_t n_inner = 0;  // 0: 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  std::string activation = "gelu_new";           // gelu_new | gelu_pytorch_tanh | gelu | relu
  bool scale_attn_weights = true;                // divide scores by sqrt(head_dim)
  bool scale_attn_by_inverse_layer_idx = false;  // further divide by (layer index + 1)
  bool tie_word_embeddings = true;               // lm_head uses transformer.wte.weight
};

Graph build_gpt2(const Gpt2Config& config, const std::string& name);
Gpt2Config gpt2_config_from_hf(const nlohmann::json& config, const std::string& source);

}  // namespace shardscope::plan
