// Gemma / Gemma 2 (model_type "gemma", "gemma2"): the config and its builder
// (plan/models_gemma.cpp). Graph conventions and cost formulas are in
// plan/graph_builder.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/graph.h"

namespace shardscope::plan {

// Hugging Face GemmaConfig / Gemma2Config (GemmaForCausalLM, Gemma2ForCausalLM),
// see plan/models_gemma.cpp.
struct GemmaConfig {
  std::string model_type = "gemma";  // "gemma" | "gemma2"
  int64_t hidden_size = 3072;
  int64_t intermediate_size = 24576;
  int64_t num_hidden_layers = 28;
  int64_t num_attention_heads = 16;
  int64_t num_key_value_heads = 16;
  int64_t head_dim = 256;  // explicit: H * head_dim need not be hidden_size
  int64_t vocab_size = 256000;
  int64_t max_position_embeddings = 8192;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  nlohmann::json rope_scaling = nullptr;         // recorded in the attention attrs
  std::string hidden_act = "gelu_pytorch_tanh";  // the MLP gate: gelu | gelu_pytorch_tanh
  bool attention_bias = false;                   // bias on q/k/v/o_proj
  bool tie_word_embeddings = true;
  // Gemma 2 only (0: off).
  double query_pre_attn_scalar = 0;  // attention scale query_pre_attn_scalar^-0.5 (0: head_dim)
  int64_t sliding_window = 0;        // window of the layers marked sliding
  std::vector<bool> sliding_layers;  // per layer (layer_types "sliding_attention")
  double final_logit_softcapping = 0;
  double attn_logit_softcapping = 0;
};

Graph build_gemma(const GemmaConfig& config, const std::string& name);
GemmaConfig gemma_config_from_hf(const nlohmann::json& config, const std::string& source);

}  // namespace shardscope::plan
