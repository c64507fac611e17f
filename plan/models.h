// Model graphs by name: presets, Hugging Face config.json files, graph JSON.
//
// Presets and their parameter counts (Hugging Face's, exactly):
//   gpt2-tiny   2 layers, n_embd 64, 4 heads, 128 positions, vocab 512     141,056
//   gpt2-small  12 x 768, 12 heads                                      124,439,808
//   gpt2-medium 24 x 1024, 16 heads                                     354,823,168
//   gpt2-large  36 x 1280, 20 heads                                     774,030,080
//   gpt2-xl     48 x 1600, 25 heads                                   1,557,611,200
//   llama-tiny  2 layers, hidden 64, ffn 176, 4 heads, 2 kv heads, vocab 512,
//               128 positions, untied                                     158,016
//   llama3-8b   Meta-Llama-3-8B                                       8,030,261,248
//   llama3-70b  Meta-Llama-3-70B                                     70,553,706,496
//   mlp         residual MLP classifier, 4 MLPBlocks of 256 (CPU tests) 1,072,906
// The graph conventions and cost formulas are in plan/graph_builder.h.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/graph.h"

namespace shardscope::plan {

// Preset names, in the order above.
std::vector<std::string> model_presets();
bool is_model_preset(const std::string& name);

// `spec` is a preset name; otherwise a file: a graph JSON written by graph_io
// ("format": "shardscope.graph") or a Hugging Face config.json of the GPT-2
// family (model_type "gpt2", or keys n_layer/n_embd), GPT-NeoX/Pythia
// ("gpt_neox"), OPT ("opt"), Gemma ("gemma"/"gemma2"), Phi-3 ("phi3"),
// mixture of experts (Mixtral "mixtral", Qwen2-MoE "qwen2_moe") or the
// Llama/Mistral/Qwen2/Qwen3 family (model_type "llama"/"mistral"/"qwen2"/
// "qwen3", or keys hidden_size/intermediate_size).
// Throws plan::Error: unknown preset / unreadable file (listing the presets),
// invalid JSON, unrecognized config, or a bad key (named, with the file).
Graph load_model(const std::string& spec);

// A parsed Hugging Face config.json -> graph; `source` names it in errors and
// becomes the model name.
Graph model_from_hf_config(const nlohmann::json& config, const std::string& source);

}  // namespace shardscope::plan
