// Llama / Mistral / Qwen2 / Qwen3 (model_type "llama", "mistral", "qwen2",
// "qwen3"): the config and its builder (plan/models_llama.cpp). Graph
// conventions and cost formulas are in plan/graph_builder.h.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/graph.h"

namespace shardscope::plan {

// Hugging Face LlamaConfig / MistralConfig (LlamaForCausalLM, MistralForCausalLM).
struct LlamaConfig {
  // "llama" | "mistral" | "qwen2": picks the class names; qwen2 also fixes
  // the biases (q/k/v_proj with bias, o_proj and the MLP without).
  std::string model_type = "llama";
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads
  int64_t vocab_size = 32000;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  nlohmann::json rope_scaling = nullptr;  // recorded in the attention attrs
  int64_t sliding_window = 0;             // Mistral; 0 = none; recorded in attrs
  bool attention_bias = false;            // bias on q/k/v/o_proj (llama, mistral)
  bool mlp_bias = false;                  // bias on gate/up/down_proj
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";  // silu | gelu | gelu_pytorch_tanh | gelu_new
  // qwen3: RMSNorm over head_dim on every query and key head before RoPE
  // (self_attn.q_norm, self_attn.k_norm, weight [head_dim]).
  bool qk_norm = false;
};

Graph build_llama(const LlamaConfig& config, const std::string& name);
LlamaConfig llama_config_from_hf(const nlohmann::json& config, const std::string& source);

}  // namespace shardscope::plan
