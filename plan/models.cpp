#include "plan/models.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "plan/error.h"
#include "plan/graph_io.h"
#include "plan/json_input.h"
#include "plan/models_gemma.h"
#include "plan/models_gpt2.h"
#include "plan/models_llama.h"
#include "plan/models_mlp.h"
#include "plan/models_moe.h"
#include "plan/models_neox.h"
#include "plan/models_opt.h"
#include "plan/models_phi3.h"

namespace shardscope::plan {

using nlohmann::json;

// ---- presets -------------------------------------------------------------------

namespace {

Gpt2Config gpt2_preset(int64_t n_layer, int64_t n_embd, int64_t n_head) {
  Gpt2Config c;
  c.n_layer = n_layer;
  c.n_embd = n_embd;
  c.n_head = n_head;
  return c;
}

// Meta-Llama-3-8B / 70B config.json values.
LlamaConfig llama3_preset(int64_t hidden, int64_t ffn, int64_t layers, int64_t heads) {
  LlamaConfig c;
  c.hidden_size = hidden;
  c.intermediate_size = ffn;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = 8;
  c.vocab_size = 128256;
  c.max_position_embeddings = 8192;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  return c;
}

struct Preset {
  const char* name;
  std::function<Graph(const std::string&)> build;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"gpt2-tiny",
       [](const std::string& n) {
         Gpt2Config c = gpt2_preset(2, 64, 4);
         c.n_positions = 128;
         c.vocab_size = 512;
         return build_gpt2(c, n);
       }},
      {"gpt2-small", [](const std::string& n) { return build_gpt2(gpt2_preset(12, 768, 12), n); }},
      {"gpt2-medium",
       [](const std::string& n) { return build_gpt2(gpt2_preset(24, 1024, 16), n); }},
      {"gpt2-large", [](const std::string& n) { return build_gpt2(gpt2_preset(36, 1280, 20), n); }},
      {"gpt2-xl", [](const std::string& n) { return build_gpt2(gpt2_preset(48, 1600, 25), n); }},
      {"llama-tiny",
       [](const std::string& n) {
         LlamaConfig c;
         c.hidden_size = 64;
         c.intermediate_size = 176;
         c.num_hidden_layers = 2;
         c.num_attention_heads = 4;
         c.num_key_value_heads = 2;
         c.vocab_size = 512;
         c.max_position_embeddings = 128;
         c.rms_norm_eps = 1e-5;
         return build_llama(c, n);
       }},
      {"llama3-8b",
       [](const std::string& n) { return build_llama(llama3_preset(4096, 14336, 32, 32), n); }},
      {"llama3-70b",
       [](const std::string& n) { return build_llama(llama3_preset(8192, 28672, 80, 64), n); }},
      {"mlp", [](const std::string& n) { return build_mlp(MlpConfig{}, n); }},
  };
  return kPresets;
}

std::string preset_list() {
  std::string out;
  for (const Preset& p : presets()) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

}  // namespace

std::vector<std::string> model_presets() {
  std::vector<std::string> names;
  for (const Preset& p : presets()) names.emplace_back(p.name);
  return names;
}

bool is_model_preset(const std::string& name) {
  for (const Preset& p : presets())
    if (name == p.name) return true;
  return false;
}

// ---- loading -------------------------------------------------------------------

Graph model_from_hf_config(const json& config, const std::string& source) {
  if (!config.is_object()) throw Error(source + ": expected a JSON object (a config.json)");
  std::string family;
  auto type = config.find("model_type");
  if (type != config.end() && !type->is_null()) {
    if (!type->is_string()) throw Error(source + ": key 'model_type': expected a string");
    const std::string t = type->get<std::string>();
    if (t == "gpt2")
      family = "gpt2";
    else if (t == "llama" || t == "mistral" || t == "qwen2" || t == "qwen3")
      family = "llama";
    else if (t == "gemma" || t == "gemma2")
      family = "gemma";
    else if (t == "phi3")
      family = "phi3";
    else if (t == "gpt_neox" || t == "opt")
      family = t;
    else if (t == "mixtral" || t == "qwen2_moe")
      family = "moe";
    else
      throw Error(source + ": unsupported model_type '" + quote_input(t) +
                  "' (supported: gemma, gemma2, gpt2, gpt_neox, llama, mistral, mixtral, opt, "
                  "phi3, qwen2, qwen2_moe, qwen3)");
  } else if (config.contains("n_layer") || config.contains("n_embd")) {
    family = "gpt2";
  } else if (config.contains("hidden_size") || config.contains("intermediate_size")) {
    family = "llama";
  } else {
    throw Error(source +
                ": not a recognized model config (expected a shardscope graph JSON, or a Hugging "
                "Face config.json with model_type gemma/gemma2/gpt2/gpt_neox/llama/mistral/"
                "mixtral/opt/phi3/qwen2/qwen2_moe/qwen3)");
  }
  if (family == "gpt2") return build_gpt2(gpt2_config_from_hf(config, source), source);
  if (family == "gemma") return build_gemma(gemma_config_from_hf(config, source), source);
  if (family == "phi3") return build_phi3(phi3_config_from_hf(config, source), source);
  if (family == "gpt_neox") return build_neox(neox_config_from_hf(config, source), source);
  if (family == "opt") return build_opt(opt_config_from_hf(config, source), source);
  if (family == "moe") return build_moe(moe_config_from_hf(config, source), source);
  return build_llama(llama_config_from_hf(config, source), source);
}

Graph load_model(const std::string& spec) {
  for (const Preset& p : presets())
    if (spec == p.name) return p.build(spec);

  std::error_code ec;
  if (std::filesystem::is_directory(spec, ec))
    throw Error("model '" + spec + "': not a preset (" + preset_list() + ") and is a directory");
  std::ifstream in(spec, std::ios::binary);
  if (!in)
    throw Error("model '" + spec + "': not a preset (" + preset_list() +
                ") and not a readable file (" + std::strerror(errno) + ")");
  in.close();
  const json j = parse_json_input(read_input_file(spec, "model", kMaxModelFileBytes), spec);
  if (j.is_object() && j.contains("format")) {
    if (j["format"] != kGraphFormat)
      throw Error(spec + ": /format: expected \"" + std::string(kGraphFormat) + "\"");
    try {
      return graph_from_json(j);
    } catch (const Error& e) {
      throw Error(spec + ": " + e.what());
    }
  }
  return model_from_hf_config(j, spec);
}

}  // namespace shardscope::plan
