// Limits on config.json sizes and workload sizes (plan/model_limits.h,
// plan/policy.h): each refused before anything is built, the message naming
// the key, its value and the limit; and the bounded readers of input files.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "plan/error.h"
#include "plan/expr.h"
#include "plan/json_input.h"
#include "plan/model_limits.h"
#include "plan/models.h"
#include "plan/models_moe.h"
#include "plan/policy.h"
#include "tests/temp_dir.h"

using namespace shardscope::plan;
using nlohmann::json;

namespace {

json tiny(const std::string& name) {
  std::ifstream in(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/" + name + ".json");
  REQUIRE(in.good());
  return json::parse(in);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("no plan::Error thrown");
  return {};
}

}  // namespace

TEST_CASE("config.json sizes above their limits are refused naming the key, value and limit",
          "[plan][limits]") {
  struct Case {
    const char* model;
    const char* key;
    int64_t value;
    int64_t limit;
  };
  const Case cases[] = {
      {"mixtral-tiny", "num_local_experts", 1000000, 4096},
      {"mixtral-tiny", "num_experts_per_tok", 5000, 4096},
      {"qwen2-tiny", "num_hidden_layers", 10000000, 1024},
      {"qwen2-tiny", "vocab_size", 4194304, 2097152},
      {"qwen2-tiny", "hidden_size", 262144, 131072},
      {"qwen2-tiny", "intermediate_size", 2097152, 1048576},
      {"qwen2-tiny", "num_attention_heads", int64_t{1} << 62, 4096},
      {"qwen2-tiny", "num_key_value_heads", 8192, 4096},
      {"qwen2-tiny", "head_dim", 8192, 4096},
      {"qwen2-tiny", "max_position_embeddings", int64_t{1} << 25, int64_t{1} << 24},
      {"qwen2_moe-tiny", "num_experts", 100000, 4096},
      {"qwen2_moe-tiny", "moe_intermediate_size", 2097152, 1048576},
      {"gemma-tiny", "head_dim", 100000, 4096},
      {"opt-tiny", "ffn_dim", 2097152, 1048576},
      {"phi3-tiny", "num_hidden_layers", 1025, 1024},
      {"gpt_neox-tiny", "vocab_size", 3000000, 2097152},
  };
  for (const Case& c : cases) {
    json config = tiny(c.model);
    config[c.key] = c.value;
    const std::string source = std::string(c.model) + ".json";
    const std::string message = error_of([&] { model_from_hf_config(config, source); });
    INFO(message);
    CHECK_THAT(message,
               Catch::StartsWith(source + ": key '" + c.key + "': " + std::to_string(c.value) +
                                 " exceeds the limit " + std::to_string(c.limit) + " ("));
  }
  // GPT-2's names for the same sizes.
  json gpt2 = {{"model_type", "gpt2"}, {"n_layer", 2},      {"n_embd", 64},
               {"n_head", 4},          {"vocab_size", 512}, {"n_positions", 128}};
  json layers = gpt2;
  layers["n_layer"] = 2000;
  CHECK_THAT(error_of([&] { model_from_hf_config(layers, "g.json"); }),
             Catch::StartsWith("g.json: key 'n_layer': 2000 exceeds the limit 1024 ("));
  json width = gpt2;
  width["n_embd"] = int64_t{1} << 40;
  CHECK_THAT(error_of([&] { model_from_hf_config(width, "g.json"); }),
             Catch::StartsWith("g.json: key 'n_embd': 1099511627776 exceeds the limit 131072 ("));
}

TEST_CASE("sizes at their limits are accepted: 1024 layers build", "[plan][limits]") {
  json config = tiny("qwen2-tiny");
  config["num_hidden_layers"] = kMaxLayers;
  const Graph g = model_from_hf_config(config, "qwen2.json");
  // Per Qwen2DecoderLayer: 2 norms, q/k/v, attention, o_proj, 2 residuals,
  // gate/up, swiglu, down = 13 ops; embedding, final norm, lm_head, loss: 4.
  CHECK(g.ops.size() == 13 * 1024 + 4);
}

TEST_CASE("num_attention_heads x head_dim above the limit is refused naming both",
          "[plan][limits]") {
  json config = tiny("qwen2-tiny");
  config["num_attention_heads"] = 4096;
  config["num_key_value_heads"] = 4096;
  config["head_dim"] = 4096;
  CHECK(error_of([&] { model_from_hf_config(config, "q.json"); }) ==
        "q.json: key 'head_dim': num_attention_heads 4096 x head_dim 4096 = 16777216 exceeds the "
        "limit 1048576 (the width of q_proj's output; published models have at most 24,576)");
  json gemma = tiny("gemma-tiny");
  gemma["num_attention_heads"] = 2048;
  gemma["num_key_value_heads"] = 1024;
  gemma["head_dim"] = 1024;
  CHECK_THAT(error_of([&] { model_from_hf_config(gemma, "g.json"); }),
             Catch::Contains("num_attention_heads 2048 x head_dim 1024 = 2097152 exceeds the "
                             "limit 1048576"));
}

TEST_CASE("moe_graph_ops counts exactly the ops build_moe makes", "[plan][limits]") {
  for (const char* name : {"mixtral-tiny", "qwen2_moe-tiny"}) {
    const MoeConfig c = moe_config_from_hf(tiny(name), name);
    CHECK(moe_graph_ops(c) == static_cast<int64_t>(build_moe(c, name).ops.size()));
  }
  // Qwen2-MoE with dense layers among the routed ones.
  json mixed = tiny("qwen2_moe-tiny");
  mixed["num_hidden_layers"] = 4;
  mixed["mlp_only_layers"] = {0};
  mixed["decoder_sparse_step"] = 2;
  const MoeConfig c = moe_config_from_hf(mixed, "mixed");
  CHECK(moe_graph_ops(c) == static_cast<int64_t>(build_moe(c, "mixed").ops.size()));
}

TEST_CASE("experts x layers over the graph-op limit are refused before building",
          "[plan][limits]") {
  json config = tiny("mixtral-tiny");
  config["num_local_experts"] = 4096;
  config["num_hidden_layers"] = 64;
  // 64 layers x (12 + 5 x 4096) ops + 4 = 1,311,492.
  CHECK(error_of([&] { model_from_hf_config(config, "m.json"); }) ==
        "m.json: key 'num_local_experts': 4096 experts in each routed layer of 64 "
        "(num_hidden_layers) would make a graph of 1311492 ops (five per expert and layer), "
        "over the limit of 250000 graph ops");
  // Kimi K2's shape (61 layers of 384 experts) is within it.
  config["num_local_experts"] = 384;
  config["num_hidden_layers"] = 61;
  const MoeConfig c = moe_config_from_hf(config, "k2");
  CHECK(moe_graph_ops(c) == 61 * (12 + 5 * 384) + 4);
}

TEST_CASE("batch_size and tokens per micro-step above their limits are refused",
          "[plan][limits][policy]") {
  // Was "element count overflows int64" from the first tensor evaluated.
  CHECK(error_of([] {
          policy_from_json(json{{"batch_size", int64_t{1} << 62}});
        }) ==
        "policy: batch_size: 4611686018427387904 exceeds the limit 1048576 (the per-rank "
        "micro-batch; real ones are at most a few thousand)");
  const Graph g = load_model("llama3-8b");  // max_position_embeddings 8192
  Policy p = policy_from_json(json{{"batch_size", 1 << 20}, {"seq_len", 8192}});
  CHECK_THAT(error_of([&] { validate_policy(p, g, 8); }),
             Catch::StartsWith("policy: batch_size: batch_size 1048576 x seq_len 8192 tokens per "
                               "micro-step exceeds the limit 4294967296 ("));
  p = policy_from_json(json{{"batch_size", 1 << 19}, {"seq_len", 8192}});
  CHECK_NOTHROW(validate_policy(p, g, 8));  // exactly 2^32 tokens
}

TEST_CASE("Poly += sums in place exactly as +", "[plan][expr]") {
  Poly sum, reference;
  for (int64_t e = 0; e < 8; ++e) {
    const Poly rows = Poly::routed(1, 1, 0, e, 8, 2) + Poly::term(3, 1, 1);
    sum += rows;
    reference = reference + rows;
  }
  CHECK(sum == reference);
  CHECK(sum.routed_terms().size() == 8);
  CHECK(sum.terms().at({1, 1}) == 24);
  // B = 2, T = 16, uniform: each expert gets 16 * 2 / 8 = 4 tokens per sequence.
  CHECK(sum.eval(Workload{2, 16}) == 8 * 2 * 4 + 24 * 2 * 16);
}

TEST_CASE("input files above the cap are refused by size before being read",
          "[plan][limits][json_input]") {
  shardscope::test::TempDir dir;
  const std::string big = (dir.path / "policy.json").string();
  { std::ofstream(big) << "{}"; }
  // A sparse 1 GiB file: what a file of whitespace looks like to the reader.
  std::filesystem::resize_file(big, uintmax_t{1} << 30);
  CHECK(error_of([&] { load_json_input(big, "--policy"); }) ==
        "--policy: '" + big + "' is 1073741824 bytes, over the limit of 67108864 bytes (64 MiB)");
  CHECK_THAT(error_of([&] { load_model(big); }),
             Catch::EndsWith("is 1073741824 bytes, over the limit of 268435456 bytes (256 MiB)"));
  // Without a size known in advance (a device), reading stops at the cap.
  CHECK(error_of([] { read_input_file("/dev/zero", "grid", size_t{1} << 20); }) ==
        "grid: '/dev/zero' is more than 1048576 bytes, over the limit of 1048576 bytes (1 MiB)");
  // At the cap exactly, the file is read.
  const std::string exact = (dir.path / "exact.json").string();
  { std::ofstream(exact) << "[1, 2]   "; }
  CHECK(read_input_file(exact, "x", 9) == "[1, 2]   ");
  CHECK_THAT(error_of([&] { read_input_file(exact, "x", 8); }),
             Catch::EndsWith("is 9 bytes, over the limit of 8 bytes"));
}
