// Qwen3 (transformers' Qwen3ForCausalLM): q_norm / k_norm over head_dim on
// every head before RoPE, explicit head_dim, attention_bias on q/k/v/o_proj,
// its sliding window refused. Totals against transformers are checked for
// every recorded config in test_hf_families.cpp.
#include <catch2/catch.hpp>

#include <string>

#include "plan/error.h"
#include "plan/models.h"

using namespace shardscope::plan;
using nlohmann::json;

namespace {

Graph qwen3_tiny() {
  return load_model(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/qwen3-tiny.json");
}

const Op& op_named(const Graph& g, const std::string& name) {
  for (const Op& op : g.ops)
    if (op.name == name) return op;
  FAIL("no op " << name);
  throw Error("unreachable");
}

}  // namespace

TEST_CASE("Qwen3: q_norm and k_norm normalise each head of q_proj / k_proj before attention",
          "[plan][models][hf]") {
  const Graph g = qwen3_tiny();  // C 64, H 4, Hkv 2, head_dim 32 (H*D = 128 != C)
  CHECK(g.family == "qwen3");
  CHECK(g.params[g.find_param("model.layers.0.self_attn.q_norm.weight")].shape ==
        std::vector<int64_t>{32});
  CHECK(g.params[g.find_param("model.layers.1.self_attn.k_norm.weight")].shape ==
        std::vector<int64_t>{32});
  CHECK(g.params[g.find_param("model.layers.0.self_attn.q_proj.weight")].shape ==
        std::vector<int64_t>{128, 64});
  CHECK(g.modules[g.find_module("model.layers.0.self_attn.q_norm")].class_name == "Qwen3RMSNorm");
  CHECK(g.modules[g.find_module("model.layers.0")].class_name == "Qwen3DecoderLayer");
  CHECK(g.find_param("model.layers.0.self_attn.q_proj.bias") < 0);  // attention_bias false

  const Op& qn = op_named(g, "model.layers.0.self_attn.q_norm");
  CHECK(qn.type == OpType::rmsnorm);
  CHECK(qn.attrs.dim == 32);
  CHECK(g.tensors[qn.inputs[0]].name == "model.layers.0.self_attn.q_proj.out");
  // One rstd per (b, t, head): [B, T, 4]; costs over all B*T*128 elements.
  const Workload w{2, 16};
  CHECK(g.tensors[qn.outputs[1]].numel_at(w) == 2 * 16 * 4);
  CHECK(qn.fwd_flops.eval(w) == 4 * 2 * 16 * 128);
  const Op& kn = op_named(g, "model.layers.0.self_attn.k_norm");
  CHECK(g.tensors[kn.outputs[1]].numel_at(w) == 2 * 16 * 2);  // Hkv heads
  const Op& attn = op_named(g, "model.layers.0.self_attn.attention");
  CHECK(attn.inputs[0] == qn.outputs[0]);
  CHECK(attn.inputs[1] == kn.outputs[0]);
  CHECK(attn.attrs.head_dim == 32);
  // Embedding 512*64 + 2 layers (norms 2*64 + q 64*128 + k, v 64*64 each + o 128*64
  // + q/k_norm 2*32 + MLP 3*64*128) + final norm; lm_head tied.
  CHECK(g.params_total() ==
        512 * 64 + 2 * (2 * 64 + 64 * 128 + 2 * 64 * 64 + 128 * 64 + 2 * 32 + 3 * 64 * 128) + 64);
}

TEST_CASE(
    "Qwen3 config: head_dim defaults to 128, attention_bias on all four projections, "
    "errors name the key",
    "[plan][models][hf]") {
  json config = {{"model_type", "qwen3"},    {"hidden_size", 64},
                 {"intermediate_size", 128}, {"num_hidden_layers", 1},
                 {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                 {"vocab_size", 512},        {"max_position_embeddings", 128},
                 {"attention_bias", true}};
  const Graph g = model_from_hf_config(config, "c.json");
  CHECK(g.params[g.find_param("model.layers.0.self_attn.q_norm.weight")].shape ==
        std::vector<int64_t>{128});  // Qwen3Config's head_dim, not 64 / 4
  for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"})
    CHECK(g.find_param(std::string("model.layers.0.self_attn.") + p + ".bias") >= 0);
  config["use_sliding_window"] = true;
  CHECK_THROWS_WITH(
      model_from_hf_config(config, "c.json"),
      Catch::Contains("c.json: key 'use_sliding_window': true is not supported (Qwen3"));
  config["use_sliding_window"] = false;
  config["mlp_bias"] = false;
  CHECK_THROWS_WITH(model_from_hf_config(config, "c.json"),
                    Catch::Contains("key 'mlp_bias': not a Qwen3 key"));
}
