// Hugging Face families against transformers itself: every entry of
// tests/recorded/hf/param_counts.json (written by scripts/hf-param-counts,
// which builds each config with transformers' AutoModelForCausalLM on the
// meta device) is read with shardscope's config reader, and its parameter
// total must equal transformers' exactly. Family specifics are checked by
// name and shape.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "plan/error.h"
#include "plan/hf_config.h"
#include "plan/models.h"

using namespace shardscope::plan;
using nlohmann::json;

namespace {

json recorded_counts() {
  std::ifstream in(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/recorded/hf/param_counts.json");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

}  // namespace

TEST_CASE("parameter totals equal transformers' for every recorded family", "[plan][models][hf]") {
  const json counts = recorded_counts();
  int qwen2 = 0, qwen3 = 0, gemma = 0, gemma2 = 0, phi3 = 0;
  for (const json& m : counts.at("models")) {
    const std::string name = m.at("name");
    INFO(name << " (transformers " << counts.at("transformers").get<std::string>() << ")");
    const Graph g = model_from_hf_config(m.at("config"), name);
    CHECK(g.params_total() == m.at("params_total").get<int64_t>());
    const json& type = m.at("config").at("model_type");
    qwen2 += type == "qwen2";
    qwen3 += type == "qwen3";
    gemma += type == "gemma";
    gemma2 += type == "gemma2";
    phi3 += type == "phi3";
  }
  CHECK(qwen2 >= 3);
  CHECK(qwen3 >= 2);   // Qwen3-0.6B, Qwen3-8B
  CHECK(gemma >= 2);   // gemma-2b, gemma-7b
  CHECK(gemma2 >= 2);  // gemma-2-2b, gemma-2-9b
  CHECK(phi3 >= 1);    // Phi-3-mini-4k-instruct
}

TEST_CASE("Qwen2: biases on q/k/v_proj only, Qwen2 class names, no sliding window",
          "[plan][models][hf]") {
  const Graph g = load_model(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/qwen2-tiny.json");
  CHECK(g.family == "qwen2");
  for (const char* p : {"q_proj", "k_proj", "v_proj"})
    CHECK(g.find_param(std::string("model.layers.1.self_attn.") + p + ".bias") >= 0);
  CHECK(g.params[g.find_param("model.layers.0.self_attn.k_proj.bias")].shape ==
        std::vector<int64_t>{2 * 16});  // Hkv * head_dim
  CHECK(g.find_param("model.layers.0.self_attn.o_proj.bias") < 0);
  CHECK(g.find_param("model.layers.0.mlp.down_proj.bias") < 0);
  bool decoder_layer = false;
  for (const Module& m : g.modules) decoder_layer |= m.class_name == "Qwen2DecoderLayer";
  CHECK(decoder_layer);
  for (const Op& op : g.ops) CHECK_FALSE(op.attrs.sliding_window.has_value());  // 4096 given, off

  json config = {{"model_type", "qwen2"},     {"hidden_size", 64},
                 {"intermediate_size", 128},  {"num_hidden_layers", 2},
                 {"num_attention_heads", 4},  {"num_key_value_heads", 2},
                 {"vocab_size", 512},         {"max_position_embeddings", 128},
                 {"use_sliding_window", true}};
  CHECK_THROWS_WITH(model_from_hf_config(config, "c.json"),
                    Catch::Contains("c.json: key 'use_sliding_window': true is not supported"));
  config["use_sliding_window"] = false;
  config["attention_bias"] = true;
  CHECK_THROWS_WITH(model_from_hf_config(config, "c.json"),
                    Catch::Contains("key 'attention_bias': not a Qwen2 key"));
  config.erase("attention_bias");
  config.erase("num_key_value_heads");
  // Qwen2Config's default num_key_value_heads is 32: 4 heads cannot share 32.
  CHECK_THROWS_WITH(model_from_hf_config(config, "c.json"), Catch::Contains("num_key_value_heads"));
  config["model_type"] = "qwen3_moe";
  CHECK_THROWS_WITH(model_from_hf_config(config, "c.json"),
                    Catch::Contains("unsupported model_type 'qwen3_moe' (supported: gemma, gemma2, "
                                    "gpt2, gpt_neox, llama, mistral, mixtral, opt, phi3, qwen2, "
                                    "qwen2_moe, qwen3)"));
}

namespace {

json tiny_config(const std::string& name) {
  std::ifstream in(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/" + name + ".json");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

std::string read_error(const json& config) {
  try {
    model_from_hf_config(config, "c.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("every family's reader names the divisor key and both values in a divisibility error",
          "[plan][models][hf]") {
  // One helper (HfConfigReader::check_divisible) behind all of them: the
  // messages are exactly those each reader wrote before.
  const json gpt2 = {{"model_type", "gpt2"}, {"n_layer", 2},      {"n_embd", 64},
                     {"n_head", 5},          {"vocab_size", 512}, {"n_positions", 128}};
  CHECK(read_error(gpt2) == "c.json: key 'n_head': n_embd 64 is not divisible by n_head 5");
  for (const char* name : {"gpt_neox-tiny", "opt-tiny"}) {
    json c = tiny_config(name);
    c["num_attention_heads"] = 5;
    CHECK(read_error(c) ==
          "c.json: key 'num_attention_heads': hidden_size 64 is not divisible by "
          "num_attention_heads 5");
  }
  for (const char* name : {"qwen2-tiny", "phi3-tiny", "mixtral-tiny"}) {
    json c = tiny_config(name);
    c["num_attention_heads"] = 6;
    c["num_key_value_heads"] = 6;
    CHECK(read_error(c) ==
          "c.json: key 'num_attention_heads': hidden_size 64 is not divisible by "
          "num_attention_heads 6 (and no head_dim is given)");
  }
  for (const char* name : {"qwen2-tiny", "phi3-tiny", "mixtral-tiny", "gemma-tiny"}) {
    json c = tiny_config(name);
    c["num_key_value_heads"] = 3;
    CHECK(read_error(c) ==
          "c.json: key 'num_key_value_heads': num_attention_heads 4 is not a multiple of "
          "num_key_value_heads 3");
  }
}

TEST_CASE("HfConfigReader::check_divisible passes multiples and names the divisor key",
          "[plan][models][hf]") {
  const json config = json::object();
  const HfConfigReader r(config, "x.json");
  CHECK_NOTHROW(r.check_divisible("hidden_size", 96, "num_attention_heads", 12));
  CHECK_NOTHROW(r.check_divisible("hidden_size", 0, "num_attention_heads", 7));
  CHECK_THROWS_WITH(r.check_divisible("hidden_size", 100, "num_attention_heads", 12),
                    "x.json: key 'num_attention_heads': hidden_size 100 is not divisible by "
                    "num_attention_heads 12");
  CHECK_THROWS_WITH(r.check_divisible("a", 7, "b", 2, "is not a multiple of", " (note)"),
                    "x.json: key 'b': a 7 is not a multiple of b 2 (note)");
}
