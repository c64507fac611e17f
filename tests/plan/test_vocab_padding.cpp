// A padded vocabulary (plan/vocab_padding.h, policy key vocab_pad_to): the
// padded graph is the builder's graph at Vp, op for op (shapes, FLOPs, bytes,
// temporaries), except that the loss knows V and an untied input embedding
// keeps V rows; bad values are refused naming the key.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "plan/error.h"
#include "plan/graph_io.h"
#include "plan/models.h"
#include "plan/models_gpt2.h"
#include "plan/models_llama.h"
#include "plan/policy.h"
#include "plan/vocab_padding.h"

using namespace shardscope;
using nlohmann::json;

namespace {

// gpt2-tiny's and llama-tiny's configs (plan/models.cpp) at vocabulary v.
plan::Graph gpt2_tiny(int64_t v) {
  plan::Gpt2Config c;
  c.n_layer = 2;
  c.n_embd = 64;
  c.n_head = 4;
  c.n_positions = 128;
  c.vocab_size = v;
  return plan::build_gpt2(c, "gpt2-tiny");
}

plan::Graph llama_tiny(int64_t v) {
  plan::LlamaConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 176;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.vocab_size = v;
  c.max_position_embeddings = 128;
  c.rms_norm_eps = 1e-5;
  return plan::build_llama(c, "llama-tiny");
}

// `padded` (V padded to Vp) against `built` (the builder at Vp): every op's
// costs and every tensor's shape equal; parameters equal but an untied input
// embedding's table, which keeps V rows.
void check_same_as_built(const plan::Graph& padded, const plan::Graph& built, int64_t v,
                         int64_t vp) {
  REQUIRE(padded.ops.size() == built.ops.size());
  REQUIRE(padded.tensors.size() == built.tensors.size());
  REQUIRE(padded.params.size() == built.params.size());
  const plan::VocabPadding pad = plan::vocab_padding(padded);
  CHECK(pad.valid == v);
  CHECK(pad.padded == vp);
  CHECK_FALSE(pad.params.empty());
  for (size_t i = 0; i < padded.tensors.size(); ++i) {
    INFO(padded.tensors[i].name);
    CHECK(padded.tensors[i].shape == built.tensors[i].shape);
  }
  int untied_tables = 0;
  for (size_t i = 0; i < padded.params.size(); ++i) {
    INFO(padded.params[i].name);
    const bool padded_param =
        std::find(pad.params.begin(), pad.params.end(), static_cast<int>(i)) != pad.params.end();
    if (padded.params[i].shape != built.params[i].shape) {
      // An untied token embedding: V rows (ids stay below V), the builder's Vp.
      CHECK_FALSE(padded_param);
      CHECK(padded.params[i].shape[0] == v);
      CHECK(built.params[i].shape[0] == vp);
      ++untied_tables;
    } else if (padded_param) {
      CHECK(padded.params[i].shape[0] == vp);
    }
  }
  CHECK(untied_tables <= 1);
  for (size_t i = 0; i < padded.ops.size(); ++i) {
    const plan::Op& a = padded.ops[i];
    const plan::Op& b = built.ops[i];
    INFO(a.name);
    CHECK(a.fwd_flops == b.fwd_flops);
    CHECK(a.bwd_flops == b.bwd_flops);
    CHECK(a.fwd_bytes == b.fwd_bytes);
    CHECK(a.bwd_bytes == b.bwd_bytes);
    CHECK(a.workspace_bytes == b.workspace_bytes);
    REQUIRE(a.fwd_temps.size() == b.fwd_temps.size());
    REQUIRE(a.bwd_temps.size() == b.bwd_temps.size());
    for (size_t t = 0; t < a.fwd_temps.size(); ++t)
      CHECK(a.fwd_temps[t].numel == b.fwd_temps[t].numel);
    for (size_t t = 0; t < a.bwd_temps.size(); ++t)
      CHECK(a.bwd_temps[t].numel == b.bwd_temps[t].numel);
    if (a.type == plan::OpType::cross_entropy) {
      CHECK(a.attrs.classes == vp);
      CHECK(a.attrs.valid_classes == v);
      CHECK_FALSE(b.attrs.valid_classes.has_value());
    } else if (a.type == plan::OpType::embedding && untied_tables == 1 && !a.attrs.positions) {
      CHECK(a.attrs.num_embeddings == v);
    } else {
      CHECK(a.attrs == b.attrs);
    }
  }
}

}  // namespace

TEST_CASE("vocab padding: gpt2-tiny 512 -> 576: the tied table and the logits at Vp, the loss at V",
          "[plan][vocab_padding]") {
  const plan::Graph g = plan::pad_vocabulary(plan::load_model("gpt2-tiny"), 96);
  // 141,056 parameters + (576 - 512) x 64 padded rows of the tied wte.
  CHECK(g.params_total() == 141056 + 64 * 64);
  CHECK(g.vocab_size == 512);  // the data's vocabulary
  const plan::Param& wte = g.params[static_cast<size_t>(g.find_param("transformer.wte.weight"))];
  CHECK(wte.shape == std::vector<int64_t>{576, 64});
  CHECK(plan::vocab_padding(g).params == std::vector<int>{g.find_param("transformer.wte.weight")});
  check_same_as_built(g, gpt2_tiny(576), 512, 576);
}

TEST_CASE("vocab padding: llama-tiny pads lm_head only, its embed_tokens keeps 512 rows",
          "[plan][vocab_padding]") {
  const plan::Graph g = plan::pad_vocabulary(plan::load_model("llama-tiny"), 100);  // 600
  CHECK(g.params[static_cast<size_t>(g.find_param("lm_head.weight"))].shape ==
        std::vector<int64_t>{600, 64});
  CHECK(g.params[static_cast<size_t>(g.find_param("model.embed_tokens.weight"))].shape ==
        std::vector<int64_t>{512, 64});
  CHECK(g.params_total() == 158016 + 88 * 64);
  check_same_as_built(g, llama_tiny(600), 512, 600);
}

TEST_CASE("vocab padding: every tiny Hugging Face family equals its builder at Vp",
          "[plan][vocab_padding][hf]") {
  // Gemma 2 puts a softcap between lm_head and the loss; OPT ties with a
  // padding_idx; GPT-NeoX, Phi-3, Qwen3 and the MoE families untie or tie.
  for (const char* name : {"gemma-tiny", "gemma2-tiny", "gpt_neox-tiny", "opt-tiny", "phi3-tiny",
                           "qwen2-tiny", "qwen3-tiny", "mixtral-tiny", "qwen2_moe-tiny"}) {
    INFO(name);
    json cfg = json::parse(
        std::ifstream(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/" + name + ".json"));
    const int64_t v = cfg.at("vocab_size").get<int64_t>();
    const int64_t vp = plan::padded_vocab(v, 96);
    REQUIRE(vp > v);
    const plan::Graph padded = plan::pad_vocabulary(plan::model_from_hf_config(cfg, name), 96);
    cfg["vocab_size"] = vp;
    check_same_as_built(padded, plan::model_from_hf_config(cfg, name), v, vp);
  }
}

TEST_CASE("vocab padding: gpt2-small 50257 -> 50304 at 128, as llm.c", "[plan][vocab_padding]") {
  CHECK(plan::padded_vocab(50257, 128) == 50304);
  const plan::Graph g = plan::pad_vocabulary(plan::load_model("gpt2-small"), 128);
  CHECK(g.params_total() == 124439808 + 47 * 768);
  const plan::VocabPadding vp = plan::vocab_padding(g);
  CHECK(vp.valid == 50257);
  CHECK(vp.padded == 50304);
}

TEST_CASE("vocab padding: 1, a multiple already, or the same padding twice change nothing",
          "[plan][vocab_padding]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  const auto same = [](const plan::Graph& a, const plan::Graph& b) {
    return plan::graph_to_json(a) == plan::graph_to_json(b);
  };
  CHECK(same(plan::pad_vocabulary(g, 1), g));
  CHECK(same(plan::pad_vocabulary(g, 128), g));  // 512 is a multiple of 128
  CHECK_FALSE(plan::vocab_padding(g).is_padded());
  const plan::Graph once = plan::pad_vocabulary(g, 96);
  CHECK(same(plan::pad_vocabulary(once, 96), once));
  CHECK(same(plan::pad_vocabulary(once, 192), once));  // 512 -> 576 either way
  CHECK_THROWS_WITH(plan::pad_vocabulary(once, 100),
                    Catch::Contains("vocab_pad_to") &&
                        Catch::Contains("pads the vocabulary of 512 to 600") &&
                        Catch::Contains("already padded to 576"));
}

TEST_CASE("vocab padding: a padded graph round-trips through graph JSON with valid_classes",
          "[plan][vocab_padding][graph_io]") {
  const plan::Graph g = plan::pad_vocabulary(plan::load_model("gpt2-tiny"), 96);
  const json j = plan::graph_to_json(g);
  const plan::Graph back = plan::graph_from_json(j);
  CHECK(plan::graph_to_json(back) == j);
  CHECK(plan::vocab_padding(back).valid == 512);
  CHECK(plan::vocab_padding(back).padded == 576);
  // valid_classes above classes is refused by validation, naming it.
  json bad = j;
  for (json& op : bad.at("ops"))
    if (op.at("type") == "cross_entropy") op.at("attrs")["valid_classes"] = 577;
  CHECK_THROWS_WITH(plan::graph_from_json(bad),
                    Catch::Contains("valid_classes 577") && Catch::Contains("[1, classes 576]"));
}

TEST_CASE("vocab_pad_to: bad values are refused naming the key, the value and the limit",
          "[plan][vocab_padding][policy]") {
  for (const json& v : {json(0), json(-128), json(1.5), json("128"), json(true)})
    CHECK_THROWS_WITH(plan::policy_from_json({{"vocab_pad_to", v}}),
                      Catch::Contains("vocab_pad_to"));
  CHECK_THROWS_WITH(
      plan::policy_from_json({{"vocab_pad_to", 65537}}),
      Catch::Contains("vocab_pad_to") && Catch::Contains("65537") && Catch::Contains("65536"));
  CHECK(plan::policy_from_json({{"vocab_pad_to", nullptr}}).vocab_pad_to == 1);
  CHECK(plan::policy_from_json({{"vocab_pad_to", 128}}).vocab_pad_to == 128);
  CHECK_THROWS_WITH(plan::pad_vocabulary(plan::load_model("gpt2-tiny"), 0),
                    Catch::Contains("vocab_pad_to") && Catch::Contains("outside [1, 65536]"));
  // A model without a vocabulary.
  CHECK_THROWS_WITH(plan::pad_vocabulary(plan::load_model("mlp"), 128),
                    Catch::Contains("vocab_pad_to") && Catch::Contains("model 'mlp'") &&
                        Catch::Contains("no vocabulary"));
  // A graph the policy says is padded but is not (pad_vocabulary skipped).
  const plan::Graph g = plan::load_model("gpt2-tiny");
  CHECK_THROWS_WITH(plan::validate_policy(plan::policy_from_json({{"vocab_pad_to", 96}}), g, 2),
                    Catch::Contains("vocab_pad_to") && Catch::Contains("512 logit columns") &&
                        Catch::Contains("not 576"));
  CHECK_NOTHROW(plan::validate_policy(plan::policy_from_json({{"vocab_pad_to", 96}}),
                                      plan::pad_vocabulary(g, 96), 2));
}
