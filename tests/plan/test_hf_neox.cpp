// GPT-NeoX / Pythia configs (plan/models_neox.cpp): transformers' module and
// parameter names, the per-head qkv layout and partial rotary on the attention
// op, parallel and sequential residuals, and strict config errors. Parameter
// totals against transformers are in test_hf_families.cpp (the recorded
// Pythia and GPT-NeoX-20B entries are counted here).
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

const Op& op_named(const Graph& g, const std::string& name) {
  for (const Op& op : g.ops)
    if (op.name == name) return op;
  FAIL("no op " << name);
  throw Error("unreachable");
}

std::string config_error(const json& config) {
  try {
    model_from_hf_config(config, "neox.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("GPT-NeoX: recorded Pythia and GPT-NeoX-20B totals are among the checked entries",
          "[plan][models][hf]") {
  const json counts =
      read_json(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/recorded/hf/param_counts.json");
  int neox = 0;
  for (const json& m : counts.at("models")) {
    if (m.at("config").at("model_type") != "gpt_neox") continue;
    ++neox;
    const Graph g = model_from_hf_config(m.at("config"), m.at("name").get<std::string>());
    CHECK(g.params_total() == m.at("params_total").get<int64_t>());
  }
  CHECK(neox >= 7);  // pythia-160m/410m/1.4b/6.9b, gpt-neox-20b, the two tiny configs
}

TEST_CASE("GPT-NeoX: names, shapes and the parameter total by hand (gpt_neox-tiny)",
          "[plan][models][hf]") {
  const Graph g = load_model(kData + "gpt_neox-tiny.json");
  CHECK(g.family == "gpt_neox");
  // C = 64, F = 256, V = 512, 2 layers: per layer 2 LayerNorms (256),
  // query_key_value 64*192 + 192, dense 64*64 + 64, dense_h_to_4h
  // 64*256 + 256, dense_4h_to_h 256*64 + 64 = 49,984; embed_in and the
  // untied embed_out 512*64 each, final_layer_norm 128.
  CHECK(g.params_total() == 2 * 49984 + 2 * 32768 + 128);
  CHECK(g.params_total() == 165632);  // transformers' count (param_counts.json)
  CHECK(g.params[g.find_param("gpt_neox.layers.1.attention.query_key_value.weight")].shape ==
        std::vector<int64_t>{192, 64});
  for (const char* p :
       {"gpt_neox.layers.0.attention.dense.bias", "gpt_neox.layers.0.mlp.dense_h_to_4h.bias",
        "gpt_neox.layers.0.post_attention_layernorm.bias", "gpt_neox.final_layer_norm.weight",
        "embed_out.weight"})
    CHECK(g.find_param(p) >= 0);
  CHECK(g.find_param("embed_out.bias") < 0);
  CHECK(g.modules[g.find_module("gpt_neox.layers.0")].class_name == "GPTNeoXLayer");
  CHECK(g.modules[g.find_module("gpt_neox.layers.0.attention")].class_name == "GPTNeoXAttention");
  CHECK(g.modules[g.find_module("gpt_neox.layers.0.mlp.act")].class_name == "GELUActivation");

  const Op& attn = op_named(g, "gpt_neox.layers.0.attention.attention");
  CHECK(attn.attrs.qkv_packed == true);
  CHECK(attn.attrs.qkv_per_head == true);
  CHECK(attn.attrs.rotary_dim == 4);  // head_dim 16 * rotary_pct 0.25
  CHECK(attn.attrs.rope_theta == 10000.0);
  CHECK(attn.attrs.scale == 0.25);  // 16 ** -0.5
  // Saved: the packed qkv (v's view keeps it), out (the copy dense reads),
  // lse, the roped q and k, and SDPA's own [B, H, T, D] output.
  REQUIRE(attn.outputs.size() == 5);
  CHECK(g.tensors[attn.outputs[2]].name == "gpt_neox.layers.0.attention.attention.q_roped");
  CHECK(g.tensors[attn.outputs[4]].name == "gpt_neox.layers.0.attention.attention.out_bhtd");
  CHECK(attn.saved.size() == 6);
  const Workload w{2, 16};
  CHECK(g.tensors[attn.outputs[3]].numel_at(w) == 2 * 16 * 64);
  // 4*B*T^2*H*D + RoPE on R = 4 of 16 dims: 3*B*T*(H + Hkv)*R.
  CHECK(attn.fwd_flops.eval(w) == 4 * 2 * 16 * 16 * 64 + 3 * 2 * 16 * 8 * 4);
  CHECK(op_named(g, "gpt_neox.layers.0.mlp.act").attrs.approximate == "none");

  // Parallel residual: both norms read the layer input; residual_1 adds the
  // two branches, residual_2 adds the layer input.
  const Op& ln1 = op_named(g, "gpt_neox.layers.1.input_layernorm");
  const Op& ln2 = op_named(g, "gpt_neox.layers.1.post_attention_layernorm");
  CHECK(ln2.inputs == ln1.inputs);
  const Op& r1 = op_named(g, "gpt_neox.layers.1.residual_1");
  const Op& r2 = op_named(g, "gpt_neox.layers.1.residual_2");
  CHECK(r1.inputs == std::vector<int>{op_named(g, "gpt_neox.layers.1.mlp.dense_4h_to_h").outputs[0],
                                      op_named(g, "gpt_neox.layers.1.attention.dense").outputs[0]});
  CHECK(r2.inputs == std::vector<int>{r1.outputs[0], ln1.inputs[0]});

  // The new attributes survive graph JSON.
  const Graph back = graph_from_json(graph_to_json(g));
  CHECK(op_named(back, "gpt_neox.layers.0.attention.attention").attrs == attn.attrs);
}

TEST_CASE("GPT-NeoX: sequential residual, no attention bias, tied embed_out",
          "[plan][models][hf]") {
  const Graph g = load_model(kData + "gpt_neox-sequential-tiny.json");
  CHECK(g.params_total() == 99328);  // transformers' count (param_counts.json)
  CHECK(g.find_param("gpt_neox.layers.0.attention.query_key_value.bias") < 0);
  CHECK(g.find_param("gpt_neox.layers.0.attention.dense.bias") < 0);
  CHECK(g.find_param("gpt_neox.layers.0.mlp.dense_h_to_4h.bias") >= 0);
  CHECK(g.find_param("embed_out.weight") < 0);  // reads gpt_neox.embed_in.weight
  const Op& r1 = op_named(g, "gpt_neox.layers.0.residual_1");
  CHECK(op_named(g, "gpt_neox.layers.0.post_attention_layernorm").inputs ==
        std::vector<int>{r1.outputs[0]});
  CHECK(op_named(g, "gpt_neox.layers.0.residual_2").inputs[1] == r1.outputs[0]);
  const Op& attn = op_named(g, "gpt_neox.layers.0.attention.attention");
  CHECK(attn.attrs.rotary_dim == 16);  // head_dim 32 * 0.5
  CHECK(attn.attrs.rope_theta == 100.0);
}

TEST_CASE("GPT-NeoX: config errors name the key", "[plan][models][hf]") {
  json c = read_json(kData + "gpt_neox-tiny.json");
  c["rotary_pct"] = 0.1;  // 16 * 0.1 = 1.6 -> 1 dim
  CHECK_THAT(config_error(c), Catch::Contains("neox.json: key 'rotary_pct': head_dim 16 * "
                                              "rotary_pct 0.1 gives 1 rotary dims"));
  c["rotary_pct"] = 1.5;
  CHECK_THAT(config_error(c), Catch::Contains("key 'rotary_pct': must be in (0, 1]"));
  c["rotary_pct"] = 1.0;
  CHECK(config_error(c).empty());  // full rotary: rotary_dim unset
  CHECK_FALSE(op_named(model_from_hf_config(c, "n"), "gpt_neox.layers.0.attention.attention")
                  .attrs.rotary_dim.has_value());
  c["partial_rotary_factor"] = 0.5;
  CHECK_THAT(config_error(c),
             Catch::Contains("key 'partial_rotary_factor': differs from rotary_pct (1.0)"));
  c.erase("partial_rotary_factor");
  c["rope_theta"] = 10000.0;  // equal to rotary_emb_base: accepted
  CHECK(config_error(c).empty());
  c["rope_theta"] = 500000.0;
  CHECK_THAT(config_error(c), Catch::Contains("key 'rope_theta': differs from rotary_emb_base"));
  c.erase("rope_theta");
  c["hidden_act"] = "silu";
  CHECK_THAT(config_error(c), Catch::Contains("key 'hidden_act': unsupported activation 'silu' "
                                              "(supported: gelu, gelu_pytorch_tanh, relu)"));
  c["hidden_act"] = "gelu";
  c.erase("intermediate_size");
  CHECK_THAT(config_error(c), Catch::Contains("key 'intermediate_size': missing (required)"));
  c["intermediate_size"] = 256;
  c["num_attention_heads"] = 5;
  CHECK_THAT(config_error(c), Catch::Contains("key 'num_attention_heads': hidden_size 64 is not "
                                              "divisible by num_attention_heads 5"));
}
