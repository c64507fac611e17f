// engine/run/cuda_support.h: the CUDA engine's op coverage, checked on the host.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

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
