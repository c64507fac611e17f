// OPT configs (plan/models_opt.cpp): transformers' module and parameter names,
// learned positions offset by 2, pre- and post-LN layers, project_in/out when
// word_embed_proj_dim differs, final layer norm rules, tied lm_head, and strict
// config errors. Parameter totals against transformers are in
// test_hf_families.cpp (the recorded OPT entries are counted here).
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "plan/error.h"
#include "plan/graph_io.h"
#include "plan/models.h"

using namespace shardscope::plan;
using nlohmann::json;

namespace {

const std::string kData = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/";

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

int op_index(const Graph& g, const std::string& name) {
  for (size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].name == name) return static_cast<int>(i);
  return -1;
}

std::string config_error(const json& config) {
  try {
    model_from_hf_config(config, "opt.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("OPT: recorded opt-125m/350m/1.3b/6.7b totals are among the checked entries",
          "[plan][models][hf]") {
  const json counts =
      read_json(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/recorded/hf/param_counts.json");
  int opt = 0;
  for (const json& m : counts.at("models")) {
    if (m.at("config").at("model_type") != "opt") continue;
    ++opt;
    const Graph g = model_from_hf_config(m.at("config"), m.at("name").get<std::string>());
    CHECK(g.params_total() == m.at("params_total").get<int64_t>());
  }
  CHECK(opt >= 6);  // opt-125m/350m/1.3b/6.7b and the two tiny configs
}

TEST_CASE("OPT: pre-LN names, positions offset by 2, tied lm_head (opt-tiny)",
          "[plan][models][hf]") {
  const Graph g = load_model(kData + "opt-tiny.json");
  CHECK(g.family == "opt");
  CHECK(g.max_seq_len == 128);
  // embed_tokens 512*64, embed_positions (128 + 2)*64, per layer q/k/v/out_proj
  // 4*(64*64 + 64), two LayerNorms 256, fc1 64*256 + 256, fc2 256*64 + 64
  // (49,984), final_layer_norm 128; lm_head tied.
  CHECK(g.params_total() == 32768 + 130 * 64 + 2 * 49984 + 128);
  CHECK(g.params_total() == 141184);  // transformers' count (param_counts.json)
  CHECK(g.params[g.find_param("model.decoder.embed_positions.weight")].shape ==
        std::vector<int64_t>{130, 64});
  CHECK(g.find_param("lm_head.weight") < 0);
  CHECK(g.find_param("model.decoder.final_layer_norm.weight") >= 0);
  CHECK(g.find_param("model.decoder.project_in.weight") < 0);
  CHECK(g.find_param("model.decoder.layers.1.self_attn.out_proj.bias") >= 0);
  CHECK(g.modules[g.find_module("model.decoder.embed_positions")].class_name ==
        "OPTLearnedPositionalEmbedding");
  CHECK(g.modules[g.find_module("model.decoder.layers.0")].class_name == "OPTDecoderLayer");
  CHECK(g.modules[g.find_module("model.decoder.layers.0.activation_fn")].class_name == "ReLU");

  CHECK(g.ops[static_cast<size_t>(op_index(g, "model.decoder.embed_tokens"))].attrs.padding_idx ==
        1);  // pad_token_id
  const Op& pos = g.ops[static_cast<size_t>(op_index(g, "model.decoder.embed_positions"))];
  CHECK_FALSE(pos.attrs.padding_idx.has_value());
  CHECK(pos.attrs.positions == true);
  CHECK(pos.attrs.position_offset == 2);
  const Op& attn =
      g.ops[static_cast<size_t>(op_index(g, "model.decoder.layers.0.self_attn.attention"))];
  CHECK(attn.attrs.scale == 0.25);  // head_dim 16 ** -0.5
  CHECK_FALSE(attn.attrs.rope.value_or(false));
  // Pre-LN: the norm runs before q_proj, final_layer_norm before fc1.
  CHECK(op_index(g, "model.decoder.layers.0.self_attn_layer_norm") <
        op_index(g, "model.decoder.layers.0.self_attn.q_proj"));
  CHECK(op_index(g, "model.decoder.layers.0.final_layer_norm") <
        op_index(g, "model.decoder.layers.0.fc1"));
  const Graph back = graph_from_json(graph_to_json(g));
  CHECK(back.ops[static_cast<size_t>(op_index(g, "model.decoder.embed_positions"))].attrs ==
        pos.attrs);
}

TEST_CASE("OPT: post-LN with project_in/out and no final layer norm (opt-350m's shape)",
          "[plan][models][hf]") {
  const Graph g = load_model(kData + "opt-postln-tiny.json");
  CHECK(g.params_total() == 128768);  // transformers' count (param_counts.json)
  CHECK(g.params[g.find_param("model.decoder.embed_tokens.weight")].shape ==
        std::vector<int64_t>{512, 32});
  CHECK(g.params[g.find_param("model.decoder.project_in.weight")].shape ==
        std::vector<int64_t>{64, 32});
  CHECK(g.params[g.find_param("model.decoder.project_out.weight")].shape ==
        std::vector<int64_t>{32, 64});
  CHECK(g.find_param("model.decoder.project_in.bias") < 0);
  CHECK(g.find_param("model.decoder.final_layer_norm.weight") < 0);
  // Post-LN: residual, then the norm.
  CHECK(op_index(g, "model.decoder.layers.0.residual_1") <
        op_index(g, "model.decoder.layers.0.self_attn_layer_norm"));
  CHECK(op_index(g, "model.decoder.layers.0.residual_2") <
        op_index(g, "model.decoder.layers.0.final_layer_norm"));
  CHECK(op_index(g, "model.decoder.project_out") == op_index(g, "lm_head") - 1);
  // lm_head reads the [512, 32] table: its input is project_out's output.
  const Op& head = g.ops[static_cast<size_t>(op_index(g, "lm_head"))];
  CHECK(head.attrs.in_features == 32);
  CHECK(head.attrs.tied == true);

  json c = read_json(kData + "opt-postln-tiny.json");
  c["do_layer_norm_before"] = true;
  c["_remove_final_layer_norm"] = true;
  const Graph removed = model_from_hf_config(c, "opt.json");
  CHECK(removed.find_param("model.decoder.final_layer_norm.weight") < 0);
  c["_remove_final_layer_norm"] = false;
  CHECK(model_from_hf_config(c, "opt.json").params_total() == 128768 + 2 * 64);
}

TEST_CASE("OPT: config errors name the key", "[plan][models][hf]") {
  json c = read_json(kData + "opt-tiny.json");
  c["layerdrop"] = 0.1;
  CHECK_THAT(config_error(c), Catch::Contains("opt.json: key 'layerdrop': only 0 is supported"));
  c["layerdrop"] = 0.0;
  c["layer_norm_elementwise_affine"] = false;
  CHECK_THAT(config_error(c), Catch::Contains("key 'layer_norm_elementwise_affine': false"));
  c["layer_norm_elementwise_affine"] = true;
  c["activation_function"] = "gelu_new";
  CHECK_THAT(config_error(c), Catch::Contains("key 'activation_function': unsupported activation "
                                              "'gelu_new' (supported: relu, gelu)"));
  c["activation_function"] = "relu";
  c.erase("ffn_dim");
  CHECK_THAT(config_error(c), Catch::Contains("key 'ffn_dim': missing (required)"));
  c["ffn_dim"] = 256;
  c["pad_token_id"] = 512;
  CHECK_THAT(config_error(c), Catch::Contains("key 'pad_token_id': 512 is not a row of "
                                              "embed_tokens (vocab_size 512)"));
  c["pad_token_id"] = nullptr;  // no padding row
  CHECK_FALSE(model_from_hf_config(c, "opt.json").ops[0].attrs.padding_idx.has_value());
  c.erase("pad_token_id");  // OPTConfig's default, 1
  CHECK(model_from_hf_config(c, "opt.json").ops[0].attrs.padding_idx == 1);
  c["word_embed_proj_dim"] = 0;
  CHECK_THAT(config_error(c), Catch::Contains("key 'word_embed_proj_dim': must be >= 1"));
}
