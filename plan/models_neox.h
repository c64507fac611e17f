// GPT-NeoX / Pythia (Hugging Face GPTNeoXForCausalLM, model_type "gpt_neox"):
// the config and its builder (plan/models_neox.cpp). Graph conventions and
// cost formulas are in plan/graph_builder.h.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/graph.h"

namespace shardscope::plan {

// Hugging Face GPTNeoXConfig (transformers 4.57); defaults are its defaults.
struct NeoxConfig {
  int64_t hidden_size = 6144;
  int64_t num_hidden_layers = 44;
  int64_t num_attention_heads = 64;
  int64_t intermediate_size = 24576;
  int64_t vocab_size = 50432;
  int64_t max_position_embeddings = 2048;
  double rotary_pct = 0.25;  // rotary_ndims = int(head_dim * rotary_pct): even, >= 2
  double rotary_emb_base = 10000.0;
  nlohmann::json rope_scaling = nullptr;  // recorded in the attention attrs
  double layer_norm_eps = 1e-5;
  bool use_parallel_residual = true;  // x + attn(ln1(x)) + mlp(ln2(x))
  bool attention_bias = true;         // bias on query_key_value and dense
  bool tie_word_embeddings = false;   // embed_out reads gpt_neox.embed_in.weight
  std::string hidden_act = "gelu";    // gelu | gelu_pytorch_tanh | relu
};

// head_dim * rotary_pct as transformers truncates it (int()).
int64_t neox_rotary_ndims(const NeoxConfig& config);
NeoxConfig neox_config_from_hf(const nlohmann::json& config, const std::string& source);
Graph build_neox(const NeoxConfig& config, const std::string& name);

}  // namespace shardscope::plan
