// engine/run/cuda_support.h: the CUDA engine's op coverage, checked on the host.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <string>

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

}  // namespace

TEST_CASE("the CUDA engine accepts the GPT-2 and Llama presets") {
  CHECK(refusal(plan::load_model("gpt2-tiny")).empty());
  CHECK(refusal(plan::load_model("llama-tiny")).empty());
}

TEST_CASE("an attribute the CUDA kernels do not implement is refused naming the op") {
  plan::Graph g = plan::load_model("llama-tiny");
  first_op(g, plan::OpType::attention).attrs.sliding_window = 16;
  const std::string why = refusal(g);
  CHECK(why.find("op 'model.layers.0.self_attn.attention' (attention): attribute sliding_window") !=
        std::string::npos);
  CHECK(why.find("--backend cpu") != std::string::npos);

  plan::Graph h = plan::load_model("llama-tiny");
  first_op(h, plan::OpType::swiglu).attrs.activation = "gelu_tanh";
  CHECK(refusal(h).find("activation 'gelu_tanh' (SiLU only)") != std::string::npos);
}

TEST_CASE("the CUDA engine refuses the Gemma, Gemma 2, Phi-3 and Qwen3 additions by name") {
  auto tiny = [](const char* file) {
    return plan::load_model(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/" + file);
  };
  // Qwen3: per-head q_norm (dim 32 of a 128-wide q).
  CHECK(refusal(tiny("qwen3-tiny.json"))
            .find("op 'model.layers.0.self_attn.q_norm' (rmsnorm): normalizing groups of dim 32") !=
        std::string::npos);
  // Gemma: the normalizer comes first.
  CHECK(refusal(tiny("gemma-tiny.json")).find("op 'model.normalizer' (scale): the scale op") !=
        std::string::npos);
  plan::Graph gemma = tiny("gemma-tiny.json");
  gemma.ops.erase(gemma.ops.begin() + 1);  // drop the scale op: the (1 + w) norm is next
  CHECK(refusal(gemma).find("(rmsnorm): attribute weight_offset") != std::string::npos);
  plan::Graph gemma2 = tiny("gemma2-tiny.json");
  for (plan::Op& op : gemma2.ops) {
    if (op.type == plan::OpType::scale || op.type == plan::OpType::rmsnorm) op.attrs = {};
    if (op.type == plan::OpType::swiglu) op.attrs.activation = "silu";
  }
  gemma2.ops.erase(
      std::remove_if(gemma2.ops.begin(), gemma2.ops.end(),
                     [](const plan::Op& op) { return op.type == plan::OpType::scale; }),
      gemma2.ops.end());
  CHECK(refusal(gemma2).find("(attention): attribute sliding_window") != std::string::npos);
  for (plan::Op& op : gemma2.ops) op.attrs.sliding_window.reset();
  CHECK(refusal(gemma2).find("(attention): attribute softcap") != std::string::npos);
  for (plan::Op& op : gemma2.ops)
    if (op.type == plan::OpType::attention) op.attrs.softcap.reset();
  CHECK(refusal(gemma2).find("op 'final_logit_softcapping' (softcap): the softcap op") !=
        std::string::npos);
  // Phi-3: packed q|k|v with 2 kv heads for 4 query heads, then the packed gate_up.
  plan::Graph phi3 = tiny("phi3-tiny.json");
  for (plan::Op& op : phi3.ops) op.attrs.sliding_window.reset();
  CHECK(refusal(phi3).find("a packed q|k|v input with grouped key/value heads") !=
        std::string::npos);
  for (plan::Op& op : phi3.ops)
    if (op.type == plan::OpType::attention) op.attrs.n_kv_head = op.attrs.n_head;
  CHECK(refusal(phi3).find("(swiglu): attribute packed") != std::string::npos);
}

TEST_CASE(
    "GPT-NeoX partial rotary and qkv layout, OPT's padding_idx and position offset are "
    "refused") {
  const std::string data = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/";
  const std::string neox = refusal(plan::load_model(data + "gpt_neox-tiny.json"));
  CHECK(neox.find("op 'gpt_neox.layers.0.attention.attention' (attention): attribute rotary_dim "
                  "(partial rotary) is not implemented by the CUDA engine") != std::string::npos);
  plan::Graph full = plan::load_model(data + "gpt_neox-tiny.json");
  first_op(full, plan::OpType::attention).attrs.rotary_dim.reset();
  CHECK(refusal(full).find("attribute qkv_per_head (GPT-NeoX qkv layout)") != std::string::npos);
  plan::Graph opt = plan::load_model(data + "opt-tiny.json");
  CHECK(refusal(opt).find("op 'model.decoder.embed_tokens' (embedding): attribute padding_idx") !=
        std::string::npos);
  first_op(opt, plan::OpType::embedding).attrs.padding_idx.reset();
  CHECK(refusal(opt).find("op 'model.decoder.embed_positions' (embedding): attribute "
                          "position_offset") != std::string::npos);
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
  // Qwen2-MoE with grouped KV heads repeats k and v before SDPA: refused for
  // that attribute alone; with as many KV heads as heads it runs.
  std::ifstream in(data + "qwen2_moe-tiny.json");
  nlohmann::json config = nlohmann::json::parse(in);
  CHECK(
      refusal(plan::model_from_hf_config(config, "qwen2_moe-tiny")) ==
      "op 'model.layers.0.self_attn.attention' (attention): attribute repeat_kv (k and v repeated "
      "before SDPA) is not implemented by the CUDA engine (use --backend cpu)");
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
