// engine/run/cuda_support.h: the CUDA engine's op coverage, checked on the host.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>

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

TEST_CASE("an attribute the CUDA kernels do not implement is refused naming the op") {
  plan::Graph g = plan::load_model("llama-tiny");
  first_op(g, plan::OpType::attention).attrs.sliding_window = 16;
  const std::string why = refusal(g);
  CHECK(why.find("op 'model.layers.0.self_attn.attention' (attention): attribute sliding_window") !=
        std::string::npos);
  CHECK(why.find("--backend cpu") != std::string::npos);
}

TEST_CASE(
    "the CUDA engine accepts the tiny configs of every dense family whose attention it runs") {
  // Accepted: every op, attention included, is implemented (engine/cuda).
  for (const char* file : {"gemma-tiny.json", "qwen2-tiny.json", "qwen3-tiny.json", "opt-tiny.json",
                           "opt-postln-tiny.json", "mixtral-tiny.json"}) {
    const std::string got = refusal(tiny(file));
    INFO(file << ": " << got);
    CHECK(got.empty());
  }
  // Refused: each by its first op that needs an attention kernel the CUDA
  // engine does not have yet.
  const std::pair<const char*, const char*> refused[] = {
      {"gemma2-tiny.json", "(attention): attribute sliding_window"},
      {"phi3-tiny.json", "(attention): attribute sliding_window"},
      {"gpt_neox-tiny.json", "(attention): attribute rotary_dim (partial rotary)"},
      {"gpt_neox-sequential-tiny.json", "(attention): attribute rotary_dim (partial rotary)"},
      {"qwen2_moe-tiny.json", "(attention): attribute repeat_kv"}};
  for (const auto& [file, why] : refused) {
    const std::string got = refusal(tiny(file));
    INFO(file << ": " << got);
    CHECK(got.find(why) != std::string::npos);
  }
}

TEST_CASE("Gemma 2's and Phi-3's non-attention ops are accepted and their attention refused") {
  // Gemma 2: once the attention attributes go, the softcap op, the scale op,
  // the (1 + w) norms and the GeGLU-tanh MLP are all accepted.
  plan::Graph gemma2 = tiny("gemma2-tiny.json");
  for (plan::Op& op : gemma2.ops) op.attrs.sliding_window.reset();
  CHECK(refusal(gemma2).find("(attention): attribute softcap") != std::string::npos);
  for (plan::Op& op : gemma2.ops)
    if (op.type == plan::OpType::attention) op.attrs.softcap.reset();
  CHECK(refusal(gemma2).empty());
  CHECK(first_op(gemma2, plan::OpType::softcap).name == "final_logit_softcapping");
  CHECK(first_op(gemma2, plan::OpType::swiglu).attrs.activation == "gelu_tanh");
  // Phi-3: packed q|k|v with 2 kv heads for 4 query heads stays refused; the
  // packed gate_up is accepted.
  plan::Graph phi3 = tiny("phi3-tiny.json");
  for (plan::Op& op : phi3.ops) op.attrs.sliding_window.reset();
  CHECK(refusal(phi3).find("a packed q|k|v input with grouped key/value heads") !=
        std::string::npos);
  for (plan::Op& op : phi3.ops)
    if (op.type == plan::OpType::attention) op.attrs.n_kv_head = op.attrs.n_head;
  CHECK(refusal(phi3).empty());
  CHECK(first_op(phi3, plan::OpType::swiglu).attrs.packed.value_or(false));
}

TEST_CASE("a gated activation other than silu or gelu or gelu_tanh is refused naming it") {
  plan::Graph g = plan::load_model("llama-tiny");
  first_op(g, plan::OpType::swiglu).attrs.activation = "relu";
  CHECK(refusal(g) ==
        "op 'model.layers.0.mlp.swiglu' (swiglu): activation 'relu' (silu, gelu, gelu_tanh) is "
        "not implemented by the CUDA engine (use --backend cpu)");
}

TEST_CASE("GPT-NeoX partial rotary and qkv layout are refused") {
  const std::string neox = refusal(tiny("gpt_neox-tiny.json"));
  CHECK(neox.find("op 'gpt_neox.layers.0.attention.attention' (attention): attribute rotary_dim "
                  "(partial rotary) is not implemented by the CUDA engine") != std::string::npos);
  plan::Graph full = tiny("gpt_neox-tiny.json");
  first_op(full, plan::OpType::attention).attrs.rotary_dim.reset();
  CHECK(refusal(full).find("attribute qkv_per_head (GPT-NeoX qkv layout)") != std::string::npos);
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
