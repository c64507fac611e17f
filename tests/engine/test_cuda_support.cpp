// engine/run/cuda_support.h: the CUDA engine's op coverage, checked on the host.
#include <catch2/catch.hpp>

#include <algorithm>
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

}  // namespace

TEST_CASE("the CUDA engine accepts the GPT-2 and Llama presets") {
  CHECK(refusal(plan::load_model("gpt2-tiny")).empty());
  CHECK(refusal(plan::load_model("llama-tiny")).empty());
}

TEST_CASE("the tiny dense families the CUDA engine accepts with windows and partial rotary") {
  const std::string data = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/";
  std::vector<std::string> accepted;
  for (const char* name :
       {"gemma-tiny", "gemma2-tiny", "gpt_neox-sequential-tiny", "gpt_neox-tiny", "mixtral-tiny",
        "opt-postln-tiny", "opt-tiny", "phi3-tiny", "qwen2-tiny", "qwen2_moe-tiny", "qwen3-tiny"})
    if (refusal(plan::load_model(data + name + ".json")).empty()) accepted.push_back(name);
  // GPT-NeoX's partial rotary and per-head qkv run (Qwen2 needed nothing
  // new); the others still need ops outside attention (tests below).
  CHECK(accepted ==
        std::vector<std::string>{"gpt_neox-sequential-tiny", "gpt_neox-tiny", "qwen2-tiny"});
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
  // Its sliding window and soft-capped attention run (engine/cuda/ops/attention_*.cu).
  CHECK(refusal(gemma2).find("op 'final_logit_softcapping' (softcap): the softcap op") !=
        std::string::npos);
  // Phi-3: its window and packed q|k|v with 2 kv heads for 4 query heads run;
  // the packed gate_up does not.
  CHECK(refusal(tiny("phi3-tiny.json")).find("(swiglu): attribute packed") != std::string::npos);
}

TEST_CASE("OPT's padding_idx and position offset are refused") {
  const std::string data = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/";
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

TEST_CASE("mixture-of-experts routing is refused by the CUDA engine, naming the op") {
  const plan::Graph g =
      plan::load_model(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/mixtral-tiny.json");
  CHECK(refusal(g) ==
        "op 'model.layers.0.block_sparse_moe.router' (moe_router): mixture-of-experts routing is "
        "not implemented by the CUDA engine (use --backend cpu)");
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
