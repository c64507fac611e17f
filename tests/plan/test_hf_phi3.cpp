// Phi-3 (transformers' Phi3ForCausalLM): fused qkv_proj packed [q | k | v]
// with grouped key/value heads, fused gate_up_proj (gate then up), sliding
// window on every layer; unsupported settings refused naming the key.
#include <catch2/catch.hpp>

#include <string>

#include "plan/error.h"
#include "plan/models.h"

using namespace shardscope::plan;
using nlohmann::json;

TEST_CASE("Phi-3: packed qkv_proj and gate_up_proj feed attention and the gated MLP",
          "[plan][models][hf]") {
  const Graph g = load_model(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/phi3-tiny.json");
  CHECK(g.family == "phi3");
  // C 64, H 4, Hkv 2, D 16: qkv_proj C -> (4 + 2*2) * 16 = 128; gate_up C -> 2 * 128.
  CHECK(g.params[g.find_param("model.layers.0.self_attn.qkv_proj.weight")].shape ==
        std::vector<int64_t>{128, 64});
  CHECK(g.params[g.find_param("model.layers.0.mlp.gate_up_proj.weight")].shape ==
        std::vector<int64_t>{256, 64});
  CHECK(g.modules[g.find_module("model.layers.1.mlp")].class_name == "Phi3MLP");
  CHECK(g.modules[g.find_module("model.layers.1")].class_name == "Phi3DecoderLayer");
  CHECK(g.find_param("model.layers.0.self_attn.q_proj.weight") < 0);
  int attentions = 0, gated = 0;
  const Workload w{2, 16};
  for (const Op& op : g.ops) {
    if (op.type == OpType::attention) {
      ++attentions;
      CHECK(op.inputs.size() == 1);
      CHECK(op.attrs.qkv_packed == true);
      CHECK(op.attrs.n_kv_head == 2);
      CHECK(op.attrs.sliding_window == 8);  // every layer
      CHECK(g.tensors[op.outputs[0]].numel_at(w) == 2 * 16 * 64);
    }
    if (op.type == OpType::swiglu) {
      ++gated;
      CHECK(op.attrs.packed == true);
      CHECK(op.inputs.size() == 1);
      CHECK(g.tensors[op.inputs[0]].numel_at(w) == 2 * 16 * 256);
      CHECK(g.tensors[op.outputs[0]].numel_at(w) == 2 * 16 * 128);
      // Saved: the whole gate_up output (chunk views keep it) and act(gate).
      REQUIRE(op.saved.size() == 2);
      CHECK(op.saved[0] == op.inputs[0]);
      CHECK(op.fwd_flops.eval(w) == 5 * 2 * 16 * 128);
    }
  }
  CHECK(attentions == 2);
  CHECK(gated == 2);
  // Untied: embedding + lm_head 2 * 512*64; per layer 2 norms, qkv 64*128, o 64*64,
  // gate_up 64*256, down 128*64; final norm.
  CHECK(g.params_total() ==
        2 * 512 * 64 + 2 * (2 * 64 + 64 * 128 + 64 * 64 + 64 * 256 + 128 * 64) + 64);
}

TEST_CASE("Phi-3 config: partial rotary, biases and other activations refused by key",
          "[plan][models][hf]") {
  json config = {{"model_type", "phi3"},           {"hidden_size", 64},
                 {"intermediate_size", 128},       {"num_hidden_layers", 1},
                 {"num_attention_heads", 4},       {"vocab_size", 512},
                 {"max_position_embeddings", 128}, {"sliding_window", nullptr}};
  const Graph g = model_from_hf_config(config, "p.json");
  for (const Op& op : g.ops) {
    CHECK_FALSE(op.attrs.sliding_window.has_value());
    if (op.type == OpType::attention) CHECK(op.attrs.n_kv_head == 4);  // default: H
  }
  config["partial_rotary_factor"] = 0.5;
  CHECK_THROWS_WITH(model_from_hf_config(config, "p.json"),
                    Catch::Contains("p.json: key 'partial_rotary_factor': only 1.0"));
  config.erase("partial_rotary_factor");
  config["attention_bias"] = true;
  CHECK_THROWS_WITH(model_from_hf_config(config, "p.json"),
                    Catch::Contains("key 'attention_bias': true is not a Phi-3 setting"));
  config.erase("attention_bias");
  config["hidden_act"] = "gelu_new";
  CHECK_THROWS_WITH(model_from_hf_config(config, "p.json"),
                    Catch::Contains("key 'hidden_act': unsupported activation 'gelu_new'"));
}
