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
