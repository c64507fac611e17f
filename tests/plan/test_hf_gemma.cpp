// Gemma and Gemma 2 (transformers' GemmaForCausalLM, Gemma2ForCausalLM): the
// embedding normalizer, RMSNorm x * rstd * (1 + w) in fp32, GeGLU, tied
// embeddings, explicit head_dim; Gemma 2's sandwich norms, attention and
// final logit soft-capping, query_pre_attn_scalar and alternating sliding
// window layers. Every key that changes the math is modelled or refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "plan/error.h"
#include "plan/graph_io.h"
#include "plan/models.h"

using namespace shardscope::plan;
using nlohmann::json;

namespace {

Graph tiny(const char* file) {
  return load_model(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/" + file);
}

const Op* find_op(const Graph& g, const std::string& name) {
  for (const Op& op : g.ops)
    if (op.name == name) return &op;
  return nullptr;
}

json gemma2_config() {
  return {{"model_type", "gemma2"}, {"hidden_size", 64},        {"intermediate_size", 128},
          {"num_hidden_layers", 3}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"head_dim", 16},         {"vocab_size", 512},        {"max_position_embeddings", 128}};
}

}  // namespace

TEST_CASE("Gemma: normalizer, (1 + w) RMSNorm in fp32, GeGLU, tied lm_head, head_dim 32",
          "[plan][models][hf]") {
  const Graph g = tiny("gemma-tiny.json");  // C 64, H 4, Hkv 1, D 32, F 128, V 512
  CHECK(g.family == "gemma");
  const Op* scale = find_op(g, "model.normalizer");
  REQUIRE(scale != nullptr);
  CHECK(scale->type == OpType::scale);
  CHECK(scale->attrs.scale == 8.0);  // sqrt(64)
  CHECK(scale->saved.empty());
  CHECK(g.tensors[scale->inputs[0]].name == "model.embed_tokens.out");
  int norms = 0;
  for (const Op& op : g.ops) {
    if (op.type == OpType::rmsnorm) {
      ++norms;
      CHECK(op.attrs.weight_offset == 1.0);
      CHECK(g.tensors[op.outputs[2]].precision == Precision::fp32);  // normed, saved in fp32
      REQUIRE(op.fwd_temps.size() == 1);
      CHECK(op.fwd_temps[0].precision == Precision::fp32_if_lowp);  // the fp32 product
    }
    if (op.type == OpType::swiglu) CHECK(op.attrs.activation == "gelu_tanh");
    if (op.type == OpType::attention) {
      CHECK(op.attrs.head_dim == 32);
      CHECK(op.attrs.n_kv_head == 1);
      CHECK(op.attrs.scale == 1.0 / std::sqrt(32.0));
      CHECK_FALSE(op.attrs.softcap.has_value());
    }
    CHECK(op.type != OpType::softcap);
  }
  CHECK(norms == 2 * 2 + 1);
  CHECK(g.modules[g.find_module("model.layers.0.post_attention_layernorm")].class_name ==
        "GemmaRMSNorm");
  CHECK(g.find_param("lm_head.weight") < 0);  // tied
  CHECK(g.params_total() ==
        512 * 64 + 2 * (2 * 64 + 64 * 128 + 2 * 64 * 32 + 128 * 64 + 3 * 64 * 128) + 64);

  // Gemma reads hidden_act (transformers 4.57's GemmaMLP): gelu is the erf form.
  json config = {{"model_type", "gemma"},    {"hidden_size", 64},
                 {"intermediate_size", 128}, {"num_hidden_layers", 1},
                 {"num_attention_heads", 4}, {"num_key_value_heads", 1},
                 {"vocab_size", 512},        {"max_position_embeddings", 128},
                 {"hidden_act", "gelu"}};
  for (const Op& op : model_from_hf_config(config, "g.json").ops)
    if (op.type == OpType::swiglu) CHECK(op.attrs.activation == "gelu");
  config["hidden_act"] = "silu";
  CHECK_THROWS_WITH(model_from_hf_config(config, "g.json"),
                    Catch::Contains("g.json: key 'hidden_act': unsupported activation 'silu'"));
  config["hidden_act"] = "gelu";
  config["final_logit_softcapping"] = 30.0;
  CHECK_THROWS_WITH(model_from_hf_config(config, "g.json"),
                    Catch::Contains("key 'final_logit_softcapping': a Gemma 2 key"));
}

TEST_CASE("Gemma 2: sandwich norms, soft-capping, query_pre_attn_scalar, sliding even layers",
          "[plan][models][hf]") {
  const Graph g = tiny("gemma2-tiny.json");
  CHECK(g.family == "gemma2");
  for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                        "post_feedforward_layernorm"})
    CHECK(g.find_param(std::string("model.layers.1.") + n + ".weight") >= 0);
  // post_attention_layernorm normalises o_proj's output before the residual add.
  const Op* post = find_op(g, "model.layers.0.post_attention_layernorm");
  REQUIRE(post != nullptr);
  CHECK(g.tensors[post->inputs[0]].name == "model.layers.0.self_attn.o_proj.out");
  CHECK(find_op(g, "model.layers.0.residual_1")->inputs[1] == post->outputs[0]);
  const Op* post_ff = find_op(g, "model.layers.0.post_feedforward_layernorm");
  CHECK(g.tensors[post_ff->inputs[0]].name == "model.layers.0.mlp.down_proj.out");

  const Op* a0 = find_op(g, "model.layers.0.self_attn.attention");
  const Op* a1 = find_op(g, "model.layers.1.self_attn.attention");
  CHECK(a0->attrs.scale == 1.0 / std::sqrt(24.0));  // query_pre_attn_scalar, not head_dim
  CHECK(a0->attrs.softcap == 2.0);
  CHECK(a1->attrs.softcap == 2.0);
  CHECK(a0->attrs.sliding_window == 8);  // layer_types default: even layers slide
  CHECK_FALSE(a1->attrs.sliding_window.has_value());
  const Workload w{2, 16};
  // Soft-capping adds 3 FLOPs per score each way: 3 * B * T^2 * H.
  CHECK(a0->fwd_flops.eval(w) ==
        4 * 2 * 16 * 16 * 4 * 16 + 3 * 2 * 16 * (4 + 2) * 16 + 3 * 2 * 16 * 16 * 4);

  const Op* cap = find_op(g, "final_logit_softcapping");
  REQUIRE(cap != nullptr);
  CHECK(cap->type == OpType::softcap);
  CHECK(cap->attrs.softcap == 3.0);
  CHECK(g.tensors[cap->inputs[0]].name == "lm_head.out");
  CHECK(cap->saved == std::vector<int>{cap->outputs[1]});  // tanh's output
  const Op& loss = g.ops.back();
  CHECK(loss.type == OpType::cross_entropy);
  CHECK(loss.inputs[0] == cap->outputs[0]);
  CHECK(g.params_total() ==
        512 * 64 + 2 * (4 * 64 + 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128) + 64);
}

TEST_CASE("Gemma 2 config: defaults, layer_types, null soft-capping, errors name the key",
          "[plan][models][hf]") {
  json config = gemma2_config();
  Graph g = model_from_hf_config(config, "c.json");
  // Gemma2Config defaults: softcaps 50 (attention) and 30 (logits), window 4096,
  // query_pre_attn_scalar 256.
  CHECK(find_op(g, "model.layers.0.self_attn.attention")->attrs.softcap == 50.0);
  CHECK(find_op(g, "model.layers.0.self_attn.attention")->attrs.scale == 1.0 / 16.0);
  CHECK(find_op(g, "model.layers.2.self_attn.attention")->attrs.sliding_window == 4096);
  CHECK(find_op(g, "final_logit_softcapping")->attrs.softcap == 30.0);

  config["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
  config["final_logit_softcapping"] = nullptr;
  config["attn_logit_softcapping"] = nullptr;
  g = model_from_hf_config(config, "c.json");
  CHECK_FALSE(find_op(g, "model.layers.0.self_attn.attention")->attrs.sliding_window.has_value());
  CHECK(find_op(g, "model.layers.1.self_attn.attention")->attrs.sliding_window == 4096);
  CHECK_FALSE(find_op(g, "model.layers.1.self_attn.attention")->attrs.softcap.has_value());
  CHECK(find_op(g, "final_logit_softcapping") == nullptr);

  config["layer_types"] = {"full_attention", "chunked_attention", "full_attention"};
  CHECK_THROWS_WITH(model_from_hf_config(config, "c.json"),
                    Catch::Contains("c.json: key 'layer_types': entry 1: expected"));
  config["layer_types"] = {"full_attention"};
  CHECK_THROWS_WITH(
      model_from_hf_config(config, "c.json"),
      Catch::Contains("key 'layer_types': expected an array of num_hidden_layers (3)"));
  config.erase("layer_types");
  config["sliding_window"] = nullptr;
  CHECK_THROWS_WITH(model_from_hf_config(config, "c.json"),
                    Catch::Contains("key 'sliding_window': null, but layer_types has"));
  config["sliding_window"] = 4096;
  config["attn_logit_softcapping"] = -1.0;
  CHECK_THROWS_WITH(model_from_hf_config(config, "c.json"),
                    Catch::Contains("key 'attn_logit_softcapping': must be > 0"));
}

TEST_CASE("graph JSON keeps scale, softcap, weight_offset, packed and per-head norms",
          "[plan][models][hf][graph_io]") {
  for (const char* name :
       {"qwen3-tiny.json", "gemma-tiny.json", "gemma2-tiny.json", "phi3-tiny.json"}) {
    INFO(name);
    const Graph g = tiny(name);
    const json first = graph_to_json(g);
    const Graph back = graph_from_json(first);
    CHECK(graph_to_json(back) == first);
    REQUIRE(back.ops.size() == g.ops.size());
    for (size_t i = 0; i < g.ops.size(); ++i) CHECK(back.ops[i].attrs == g.ops[i].attrs);
  }
  for (OpType t : {OpType::scale, OpType::softcap})
    CHECK(parse_op_type(op_type_name(t), "type") == t);
  // weight_offset belongs to rmsnorm only: the first layernorm of gpt2-tiny refuses it.
  json j = graph_to_json(load_model("gpt2-tiny"));
  for (json& op : j["ops"])
    if (op["type"] == "layernorm") {
      op["attrs"]["weight_offset"] = 1.0;
      break;
    }
  CHECK_THROWS_WITH(graph_from_json(j), Catch::Contains("weight_offset: unknown key for a "
                                                        "layernorm op"));
}
