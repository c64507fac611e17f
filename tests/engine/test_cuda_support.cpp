// engine/run/cuda_support.h: the CUDA engine's op coverage, checked on the host.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/run/aten_support.h"
#include "engine/run/cuda_support.h"
#include "plan/models.h"

using namespace shardscope;

namespace {

std::string refusal(const plan::Graph& g) {
  try {
    engine::run::check_cuda_supports(g);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

plan::Op& first_op(plan::Graph& g, plan::OpType type) {
  for (plan::Op& op : g.ops)
    if (op.type == type) return op;
  throw std::logic_error("no such op");
}

plan::Graph tiny(const std::string& file) {
  return plan::load_model(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/" + file);
}

}  // namespace

TEST_CASE("the CUDA engine accepts the GPT-2 and Llama presets") {
  CHECK(refusal(plan::load_model("gpt2-tiny")).empty());
  CHECK(refusal(plan::load_model("llama-tiny")).empty());
}

TEST_CASE("every tiny family configuration is accepted by the CUDA engine") {
  // Issue 33, item 3: the norms, scale, softcap, gated MLPs and OPT positions
  // (h-cuda-hf), windows, soft-capped attention, partial rotary, GPT-NeoX's
  // and Phi-3's qkv layouts and repeated k/v (h-cuda-attn), and the MoE ops.
  std::vector<std::string> refused;
  for (const char* file :
       {"gemma-tiny.json", "gemma2-tiny.json", "gpt_neox-sequential-tiny.json",
        "gpt_neox-tiny.json", "mixtral-tiny.json", "opt-postln-tiny.json", "opt-tiny.json",
        "phi3-tiny.json", "qwen2-tiny.json", "qwen2_moe-tiny.json", "qwen3-tiny.json"}) {
    const std::string got = refusal(tiny(file));
    if (!got.empty()) refused.push_back(std::string(file) + ": " + got);
  }
  CHECK(refused == std::vector<std::string>{});
  // Mistral: llama-tiny's layers with a sliding window (k and v repeated under the mask).
  plan::Graph mistral = plan::load_model("llama-tiny");
  for (plan::Op& op : mistral.ops)
    if (op.type == plan::OpType::attention) op.attrs.sliding_window = 8;
  CHECK(refusal(mistral).empty());
}

TEST_CASE("an attribute the CUDA kernels do not implement is refused naming the op") {
  plan::Graph g = plan::load_model("llama-tiny");
  first_op(g, plan::OpType::attention).attrs.rope_scaling =
      R"({"factor":8.0,"rope_type":"llama3"})";
  const std::string why = refusal(g);
  CHECK(why.find("op 'model.layers.0.self_attn.attention' (attention): attribute rope_scaling "
                 "(the CPU engine has none either)") != std::string::npos);
  CHECK(why.find("--backend cpu") != std::string::npos);
}

TEST_CASE("a gated activation other than silu or gelu or gelu_tanh is refused naming it") {
  plan::Graph g = plan::load_model("llama-tiny");
  first_op(g, plan::OpType::swiglu).attrs.activation = "relu";
  CHECK(refusal(g) ==
        "op 'model.layers.0.mlp.swiglu' (swiglu): activation 'relu' (silu, gelu, gelu_tanh) is "
        "not implemented by the CUDA engine (use --backend cpu)");
}

TEST_CASE("per-unit dtypes (policy overrides) are refused for the CUDA engine, reshards are not") {
  const auto policy = [](const char* overrides) {
    nlohmann::json doc = {{"mixed_precision", {{"param_dtype", "bf16"}}}};
    doc["overrides"] = nlohmann::json::parse(overrides);
    return plan::policy_from_json(doc);
  };
  std::string why;
  try {
    engine::run::check_cuda_supports(
        policy(R"([{"units": ["model.layers.1"], "reshard_after_forward": false},
                   {"units": ["<root>"], "mixed_precision": {"param_dtype": "fp32"}}])"));
  } catch (const std::invalid_argument& e) {
    why = e.what();
  }
  CHECK(why.find("overrides[1].mixed_precision: per-unit dtypes") != std::string::npos);
  CHECK(why.find("--backend cpu") != std::string::npos);
  CHECK_NOTHROW(engine::run::check_cuda_supports(
      policy(R"([{"units": ["model.layers.1"], "reshard_after_forward": false},
                 {"units": ".*", "mixed_precision": {"param_dtype": "bf16"}}])")));
}

TEST_CASE("the CUDA engine accepts the mixture-of-experts families: Mixtral and Qwen2-MoE") {
  // Mixtral: router, dispatch and combine; Qwen2-MoE adds the shared expert's
  // sigmoid gate. The CUDA engine refused all four op types before.
  const std::string data = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/";
  auto count = [](const plan::Graph& g, plan::OpType t) {
    return std::count_if(g.ops.begin(), g.ops.end(),
                         [t](const plan::Op& op) { return op.type == t; });
  };
  const plan::Graph mixtral = plan::load_model(data + "mixtral-tiny.json");
  CHECK(count(mixtral, plan::OpType::moe_router) == 2);
  CHECK(count(mixtral, plan::OpType::moe_dispatch) == 8);
  CHECK(count(mixtral, plan::OpType::moe_combine) == 2);
  CHECK(refusal(mixtral).empty());
  // Qwen2-MoE repeats k and v before SDPA with grouped KV heads (run since
  // h-cuda-attn); with as many KV heads as heads too.
  std::ifstream in(data + "qwen2_moe-tiny.json");
  nlohmann::json config = nlohmann::json::parse(in);
  CHECK(refusal(plan::model_from_hf_config(config, "qwen2_moe-tiny")).empty());
  config["num_key_value_heads"] = config["num_attention_heads"];
  const plan::Graph qwen = plan::model_from_hf_config(config, "qwen2_moe-tiny (MHA)");
  CHECK(count(qwen, plan::OpType::moe_router) == 2);  // layer 1 is dense (mlp_only_layers)
  CHECK(count(qwen, plan::OpType::sigmoid_gate) == 2);
  CHECK(refusal(qwen).empty());
}

TEST_CASE("an exported graph's aten op is refused by name and overload, before any rank starts") {
  const plan::Graph g = plan::load_model(std::string(SHARDSCOPE_SOURCE_DIR) +
                                         "/tests/data/exported/tiny-mlp.graph.json");
  CHECK(refusal(g) ==
        "layers.0.fc.addmm (aten.addmm.default): the CUDA engine does not run aten ops of "
        "exported graphs (simulate and sweep take them)");
  CHECK_THROWS_WITH(engine::run::check_engine_runs_aten(g, "CPU"),
                    "layers.0.fc.addmm (aten.addmm.default): the CPU engine does not run aten "
                    "ops of exported graphs (simulate and sweep take them)");
  // A graph with a module buffer but only native ops: refused naming the buffer.
  plan::Graph native = plan::load_model("mlp");
  native.tensors.push_back(plan::Tensor{"inv_freq", {plan::Poly::constant(4)}});
  native.tensors.back().requires_grad = false;
  native.buffers.push_back(static_cast<int>(native.tensors.size()) - 1);
  CHECK_THROWS_WITH(engine::run::check_engine_runs_aten(native, "CPU"),
                    "buffer tensor 'inv_freq': the CPU engine does not hold module buffers of "
                    "exported graphs (simulate and sweep take them)");
  CHECK_NOTHROW(engine::run::check_engine_runs_aten(plan::load_model("mlp"), "CPU"));
}
