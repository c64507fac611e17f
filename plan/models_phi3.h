// Phi-3 (model_type "phi3"): the config and its builder (plan/models_phi3.cpp).
// Graph conventions and cost formulas are in plan/graph_builder.h.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/graph.h"

namespace shardscope::plan {

// Hugging Face Phi3Config (Phi3ForCausalLM), see plan/models_phi3.cpp.
struct Phi3Config {
  int64_t hidden_size = 3072;
  int64_t intermediate_size = 8192;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads
  int64_t vocab_size = 32064;
  int64_t max_position_embeddings = 4096;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  nlohmann::json rope_scaling = nullptr;  // recorded in the attention attrs
  int64_t sliding_window = 0;             // every layer; 0 = none
  std::string hidden_act = "silu";        // silu | gelu | gelu_pytorch_tanh
  bool tie_word_embeddings = false;
};

Graph build_phi3(const Phi3Config& config, const std::string& name);
Phi3Config phi3_config_from_hf(const nlohmann::json& config, const std::string& source);

}  // namespace shardscope::plan
