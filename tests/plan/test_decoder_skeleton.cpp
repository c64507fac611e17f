// The decoder skeleton the RoPE families share (plan/decoder_skeleton.h):
// module order and class names, the tied lm_head, the hooks' places, the
// RoPE attention attributes and the size check.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/decoder_skeleton.h"
#include "plan/error.h"

using namespace shardscope::plan;

namespace {

DecoderSkeleton tiny(bool tied) {
  DecoderSkeleton s;
  s.model_name = "tiny";
  s.family = "llama";
  s.class_prefix = "Tiny";
  s.hidden_size = 8;
  s.vocab_size = 16;
  s.num_hidden_layers = 2;
  s.max_position_embeddings = 32;
  s.tie_word_embeddings = tied;
  return s;
}

}  // namespace

TEST_CASE("decoder skeleton: modules in forward order, PForCausalLM names, hooks in place",
          "[plan][models]") {
  const DecoderSkeleton s = tiny(/*tied=*/false);
  DecoderHooks hooks;
  std::vector<int64_t> layers_seen;
  hooks.layer = [&](GraphBuilder& gb, int layer, int64_t index, int x) {
    layers_seen.push_back(index);
    return decoder_norm(gb, s, layer, "input_layernorm", x);
  };
  hooks.after_embedding = [](GraphBuilder& gb, int model, int x) {
    return gb.scale(model, "normalizer", x, 2.0);
  };
  hooks.logits = [](GraphBuilder& gb, int root, int logits) {
    return gb.softcap(root, "final_logit_softcapping", logits, 30.0);
  };
  const Graph g = build_decoder(s, hooks);
  CHECK(layers_seen == std::vector<int64_t>{0, 1});
  std::vector<std::string> modules, classes;
  for (const Module& m : g.modules) {
    modules.push_back(m.name);
    classes.push_back(m.class_name);
  }
  CHECK(modules == std::vector<std::string>{"", "model", "model.embed_tokens", "model.layers",
                                            "model.layers.0", "model.layers.0.input_layernorm",
                                            "model.layers.1", "model.layers.1.input_layernorm",
                                            "model.norm", "lm_head"});
  CHECK(classes == std::vector<std::string>{"TinyForCausalLM", "TinyModel", "Embedding",
                                            "ModuleList", "TinyDecoderLayer", "TinyRMSNorm",
                                            "TinyDecoderLayer", "TinyRMSNorm", "TinyRMSNorm",
                                            "Linear"});
  std::vector<std::string> ops;
  for (const Op& op : g.ops) ops.push_back(op.name);
  CHECK(ops == std::vector<std::string>{"model.embed_tokens", "model.normalizer",
                                        "model.layers.0.input_layernorm",
                                        "model.layers.1.input_layernorm", "model.norm", "lm_head",
                                        "final_logit_softcapping", "cross_entropy"});
  // Untied: embed_tokens [16, 8], three RMSNorm weights [8], lm_head [16, 8].
  CHECK(g.params_total() == 16 * 8 + 3 * 8 + 16 * 8);
  CHECK(g.family == "llama");
  CHECK(g.max_seq_len == 32);
}

TEST_CASE("decoder skeleton: a tied lm_head reads model.embed_tokens.weight", "[plan][models]") {
  const DecoderSkeleton s = tiny(/*tied=*/true);
  DecoderHooks hooks;
  hooks.layer = [&](GraphBuilder& gb, int layer, int64_t, int x) {
    return decoder_norm(gb, s, layer, "input_layernorm", x);
  };
  const Graph g = build_decoder(s, hooks);
  CHECK(g.params_total() == 16 * 8 + 3 * 8);
  const Op& head = g.ops[g.ops.size() - 2];
  REQUIRE(head.name == "lm_head");
  REQUIRE(head.params.size() == 1);
  CHECK(g.params[static_cast<size_t>(head.params[0])].name == "model.embed_tokens.weight");
  CHECK_THROWS_WITH(build_decoder(s, DecoderHooks{}), "decoder 'tiny': no layer builder");
}

TEST_CASE("rope_attention_attrs: scale scale_dim^-0.5, rope_scaling and window only when set",
          "[plan][models]") {
  const OpAttrs plain = rope_attention_attrs(500000.0, 128.0, nullptr);
  CHECK(plain.rope == true);
  CHECK(plain.rope_theta == 500000.0);
  CHECK(*plain.scale == 1.0 / std::sqrt(128.0));
  CHECK_FALSE(plain.rope_scaling.has_value());
  CHECK_FALSE(plain.sliding_window.has_value());
  const nlohmann::json scaling = {{"rope_type", "linear"}, {"factor", 2.0}};
  const OpAttrs windowed = rope_attention_attrs(1e4, 256.0, scaling, 4096);
  CHECK(*windowed.scale == 1.0 / 16.0);
  CHECK(windowed.rope_scaling == scaling.dump());
  CHECK(windowed.sliding_window == 4096);
}

TEST_CASE("check_decoder_sizes names the family and the model", "[plan][models]") {
  DecoderSizes sizes{64, 176, 2, 4, 2, 512, 128, 16};
  CHECK_NOTHROW(check_decoder_sizes("llama", "m.json", sizes));
  sizes.num_key_value_heads = 3;
  CHECK_THROWS_WITH(check_decoder_sizes("phi3", "m.json", sizes),
                    "phi3 config for 'm.json': sizes must be positive and num_attention_heads a "
                    "multiple of num_key_value_heads");
  sizes.num_key_value_heads = 2;
  sizes.head_dim = 0;
  CHECK_THROWS_AS(check_decoder_sizes("moe", "m.json", sizes), Error);
}
