// Mixture of experts: Mixtral and Qwen2-MoE configs (parameter totals against
// transformers' recorded ones, module and parameter names, the routed sizes
// under each token balance), the policy keys token_balance and moe_routing,
// and their errors, each naming the field.
#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "plan/error.h"
#include "plan/graph_io.h"
#include "plan/models.h"
#include "plan/policy.h"
#include "plan/workload_sizes.h"

using namespace shardscope::plan;
using nlohmann::json;

namespace {

const std::string kData = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/";

json recorded(const std::string& name) {
  std::ifstream in(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/recorded/hf/param_counts.json");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const json all = json::parse(text.str());
  for (const json& m : all.at("models"))
    if (m.at("name") == name) return m;
  FAIL("no recorded entry " << name);
  return {};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

const Op& op_named(const Graph& g, const std::string& name) {
  for (const Op& op : g.ops)
    if (op.name == name) return op;
  FAIL("no op " << name);
  return g.ops.front();
}

int64_t numel(const Graph& g, const std::string& tensor, const Workload& w) {
  for (const Tensor& t : g.tensors)
    if (t.name == tensor) return t.numel_at(w);
  FAIL("no tensor " << tensor);
  return -1;
}

}  // namespace

TEST_CASE("Mixtral and Qwen2-MoE totals equal transformers', published sizes included",
          "[plan][models][hf][moe]") {
  // Mixtral-8x7B: published 46.7B; Qwen1.5-MoE-A2.7B: 14.3B (transformers 4.57 on meta).
  const std::pair<const char*, int64_t> published[] = {
      {"Mixtral-8x7B-v0.1", 46702792704}, {"Mixtral-8x22B-v0.1", 140630071296},
      {"Qwen1.5-MoE-A2.7B", 14315784192}, {"Qwen2-57B-A14B", 57408658944},
      {"mixtral-tiny", 238400},           {"qwen2_moe-tiny", 232896}};
  for (const auto& [name, total] : published) {
    INFO(name);
    const json m = recorded(name);
    CHECK(m.at("params_total").get<int64_t>() == total);
    CHECK(model_from_hf_config(m.at("config"), name).params_total() == total);
  }
  // The tiny configs are the files the engine tests train.
  CHECK(load_model(kData + "mixtral-tiny.json").params_total() == 238400);
  CHECK(load_model(kData + "qwen2_moe-tiny.json").params_total() == 232896);
}

TEST_CASE("Mixtral: block_sparse_moe with a gate and w1/w3/w2 experts, routed ops in order",
          "[plan][models][hf][moe]") {
  const Graph g = load_model(kData + "mixtral-tiny.json");
  CHECK(g.family == "mixtral");
  // C 64, F 96, E 4, top-2; no biases anywhere.
  CHECK(g.params[g.find_param("model.layers.1.block_sparse_moe.gate.weight")].shape ==
        std::vector<int64_t>{4, 64});
  CHECK(g.params[g.find_param("model.layers.0.block_sparse_moe.experts.3.w1.weight")].shape ==
        std::vector<int64_t>{96, 64});
  CHECK(g.params[g.find_param("model.layers.0.block_sparse_moe.experts.3.w2.weight")].shape ==
        std::vector<int64_t>{64, 96});
  for (const Param& p : g.params) CHECK(p.name.find(".bias") == std::string::npos);
  const int block = g.find_module("model.layers.0.block_sparse_moe");
  REQUIRE(block >= 0);
  CHECK(g.modules[block].class_name == "MixtralSparseMoeBlock");
  CHECK(g.modules[g.find_module("model.layers.0.block_sparse_moe.experts.0")].class_name ==
        "MixtralBlockSparseTop2MLP");
  const Op& router = op_named(g, "model.layers.0.block_sparse_moe.router");
  CHECK(router.type == OpType::moe_router);
  CHECK(router.attrs.num_experts == 4);
  CHECK(router.attrs.top_k == 2);
  CHECK(router.attrs.norm_topk_prob == true);  // Mixtral always renormalises
  // Forward order within the block: gate, router, per expert dispatch, w1,
  // w3, swiglu, w2, then combine.
  std::vector<std::string> names;
  for (const Op& op : g.ops)
    if (op.name.rfind("model.layers.0.block_sparse_moe", 0) == 0) names.push_back(op.name);
  REQUIRE(names.size() == 2 + 4 * 5 + 1);
  const std::string e1 = "model.layers.0.block_sparse_moe.experts.1";
  CHECK(names[0] == "model.layers.0.block_sparse_moe.gate");
  CHECK(names[1] == "model.layers.0.block_sparse_moe.router");
  CHECK(names[7] == e1 + ".dispatch");
  CHECK(names[8] == e1 + ".w1");
  CHECK(names[9] == e1 + ".w3");
  CHECK(names[10] == e1 + ".swiglu");
  CHECK(names[11] == e1 + ".w2");
  CHECK(names.back() == "model.layers.0.block_sparse_moe.combine");
  // Each expert's rows: B*routed(e,4,2); the tensors carry the term.
  const Op& dispatch = op_named(g, e1 + ".dispatch");
  CHECK(dispatch.attrs.expert == 1);
  CHECK(g.tensors[dispatch.outputs[0]].shape[0].to_string() == "B*routed(1,4,2)");
  CHECK(g.tensors[dispatch.outputs[1]].dtype == DType::i64);
  // Graph JSON keeps the routed terms and the attributes.
  const json j = graph_to_json(g);
  CHECK(graph_to_json(graph_from_json(j)) == j);
}

TEST_CASE("Qwen2-MoE: shared expert with a sigmoid gate, dense layers from mlp_only_layers",
          "[plan][models][hf][moe]") {
  const Graph g = load_model(kData + "qwen2_moe-tiny.json");
  CHECK(g.family == "qwen2_moe");
  // Layers 0 and 2 routed, layer 1 dense (mlp_only_layers [1]).
  CHECK(g.find_param("model.layers.0.mlp.gate.weight") >= 0);
  CHECK(g.find_param("model.layers.2.mlp.experts.3.down_proj.weight") >= 0);
  CHECK(g.find_param("model.layers.1.mlp.gate.weight") < 0);
  CHECK(g.params[g.find_param("model.layers.1.mlp.gate_proj.weight")].shape ==
        std::vector<int64_t>{128, 64});
  CHECK(g.params[g.find_param("model.layers.0.mlp.experts.0.gate_proj.weight")].shape ==
        std::vector<int64_t>{48, 64});
  CHECK(g.params[g.find_param("model.layers.0.mlp.shared_expert.up_proj.weight")].shape ==
        std::vector<int64_t>{80, 64});
  CHECK(g.params[g.find_param("model.layers.0.mlp.shared_expert_gate.weight")].shape ==
        std::vector<int64_t>{1, 64});
  CHECK(g.find_param("model.layers.0.self_attn.q_proj.bias") >= 0);  // qkv_bias
  CHECK(g.find_param("model.layers.0.self_attn.o_proj.bias") < 0);
  CHECK(g.modules[g.find_module("model.layers.1.mlp")].class_name == "Qwen2MoeMLP");
  CHECK(g.modules[g.find_module("model.layers.0.mlp")].class_name == "Qwen2MoeSparseMoeBlock");
  CHECK_FALSE(op_named(g, "model.layers.0.mlp.router").attrs.norm_topk_prob.has_value());
  const Op& gate = op_named(g, "model.layers.0.mlp.shared_gate");
  CHECK(gate.type == OpType::sigmoid_gate);
  const Op& add = op_named(g, "model.layers.0.mlp.shared_add");
  CHECK(add.type == OpType::residual);
  CHECK(add.inputs[0] == op_named(g, "model.layers.0.mlp.combine").outputs[0]);
  CHECK(add.inputs[1] == gate.outputs[0]);
  // decoder_sparse_step 2: layers 1, 3, ... routed (layer_idx + 1) % step == 0.
  json c = recorded("qwen2_moe-tiny").at("config");
  c["decoder_sparse_step"] = 2;
  c.erase("mlp_only_layers");
  const Graph stepped = model_from_hf_config(c, "c.json");
  CHECK(stepped.find_param("model.layers.0.mlp.gate.weight") < 0);
  CHECK(stepped.find_param("model.layers.1.mlp.gate.weight") >= 0);
  CHECK(stepped.find_param("model.layers.2.mlp.gate.weight") < 0);
}

TEST_CASE("expert sizes follow the token balance, the experts' FLOPs sum to B*T*k rows' worth",
          "[plan][models][moe]") {
  const Graph g = load_model(kData + "mixtral-tiny.json");
  const std::string e = "model.layers.0.block_sparse_moe.experts.";
  // B 2, T 10, top-2 of 4: 20 slots per sequence, 5 per expert, 10 rows of 64.
  Policy p = policy_from_json({{"batch_size", 2}, {"seq_len", 10}});
  Workload w = policy_workload(p, g);
  for (int x = 0; x < 4; ++x)
    CHECK(numel(g, e + std::to_string(x) + ".dispatch.out", w) == 10 * 64);
  // Weights 0.5, 0.25, 0.125, 0.125 of the 20 slots: 10, 5, 2, 3 per sequence
  // (cumulative floors 10, 15, 17, 20).
  p = policy_from_json({{"batch_size", 2},
                        {"seq_len", 10},
                        {"token_balance", {{"weights", {0.5, 0.25, 0.125, 0.125}}}}});
  validate_policy(p, g, 1);
  w = policy_workload(p, g);
  const int64_t rows[4] = {20, 10, 4, 6};
  for (int x = 0; x < 4; ++x) CHECK(numel(g, e + std::to_string(x) + ".w1.out", w) == rows[x] * 96);
  // A linear's FLOPs follow its rows; summed over experts they are the same
  // whatever the balance: B*T*k rows of 2*C*F.
  const WorkloadSizes uniform =
      workload_sizes(g, policy_workload(policy_from_json({{"batch_size", 2}, {"seq_len", 10}}), g));
  const WorkloadSizes skewed = workload_sizes(g, w);
  double sum_u = 0, sum_s = 0;
  for (size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].name.rfind(e, 0) == 0 && g.ops[i].name.find(".w1") != std::string::npos) {
      sum_u += uniform.fwd_flops[i];
      sum_s += skewed.fwd_flops[i];
    }
  CHECK(sum_u == 2.0 * 10 * 2 * (2 * 64 * 96));
  CHECK(sum_s == sum_u);
  CHECK_FALSE(uniform.matches(g, w));  // sizes of another balance are not reused
  // Real top-k routing: every expert sized for all B*T tokens.
  p = policy_from_json({{"batch_size", 2}, {"seq_len", 10}, {"moe_routing", "topk"}});
  w = policy_workload(p, g);
  for (int x = 0; x < 4; ++x) CHECK(numel(g, e + std::to_string(x) + ".dispatch.slots", w) == 20);
}

TEST_CASE("token_balance and moe_routing errors name the field", "[plan][policy][moe]") {
  const Graph g = load_model(kData + "mixtral-tiny.json");
  auto policy_error = [&](const json& doc) {
    return error_of([&] { validate_policy(policy_from_json(doc), g, 1); });
  };
  CHECK_THAT(policy_error({{"token_balance", {{"weights", {0.5, 0.25, 0.125, 0.1}}}}}),
             Catch::Contains("policy: token_balance.weights: the weights sum to 0.975, not 1"));
  CHECK_THAT(policy_error({{"token_balance", {{"weights", {0.5, 0.5}}}}}),
             Catch::Contains("policy: token_balance.weights: 2 weights, but the model's layer "
                             "'model.layers.0.block_sparse_moe.router' has 4 experts"));
  CHECK_THAT(policy_error({{"token_balance", "zipf"}}),
             Catch::Contains("policy: token_balance: unknown mode 'zipf'"));
  CHECK_THAT(policy_error({{"token_balance", {{"weights", {0.7, 0.1, 0.1, 0.1}}}}}),
             Catch::Contains("policy: token_balance.weights[0]: a share above 1/top_k"));
  CHECK_THAT(policy_error({{"token_balance", {{"weights", {1.5, -0.5, 0, 0}}}}}),
             Catch::Contains("policy: token_balance.weights[1]: must be >= 0"));
  CHECK_THAT(policy_error({{"token_balance", {{"shares", {1}}}}}),
             Catch::Contains("policy: token_balance.shares: unknown key"));
  CHECK_THAT(policy_error({{"moe_routing", "random"}}),
             Catch::Contains("policy: moe_routing: unknown value 'random'"));
  // Not a mixture of experts: the keys do not apply.
  const Graph dense = load_model("llama-tiny");
  CHECK_THAT(
      error_of([&] {
        validate_policy(policy_from_json({{"token_balance", {{"weights", {0.5, 0.5}}}}}), dense, 1);
      }),
      Catch::Contains("policy: token_balance: applies to mixture-of-experts models only"));
  CHECK_THAT(error_of([&] {
               validate_policy(policy_from_json({{"moe_routing", "topk"}}), dense, 1);
             }),
             Catch::Contains("policy: moe_routing: applies to mixture-of-experts models only"));
  // "uniform" written out is the default; the JSON keeps only what is set.
  const json once = policy_to_json(policy_from_json(
      {{"token_balance", {{"weights", {0.25, 0.25, 0.25, 0.25}}}}, {"moe_routing", "topk"}}));
  CHECK(once.at("token_balance").at("weights").size() == 4);
  CHECK(once.at("moe_routing") == "topk");
  CHECK(policy_to_json(policy_from_json(once)) == once);
  CHECK_FALSE(
      policy_to_json(policy_from_json({{"token_balance", "uniform"}})).contains("token_balance"));
}

TEST_CASE("MoE config errors name the key, unsupported families list the MoE ones",
          "[plan][models][hf][moe]") {
  json mixtral = recorded("mixtral-tiny").at("config");
  json c = mixtral;
  c["output_router_logits"] = true;
  CHECK_THAT(error_of([&] { model_from_hf_config(c, "c.json"); }),
             Catch::Contains("c.json: key 'output_router_logits': true adds the router's"));
  c = mixtral;
  c["router_jitter_noise"] = 0.01;
  CHECK_THAT(error_of([&] { model_from_hf_config(c, "c.json"); }),
             Catch::Contains("key 'router_jitter_noise': only 0 is supported"));
  c = mixtral;
  c["num_experts_per_tok"] = 5;
  CHECK_THAT(error_of([&] { model_from_hf_config(c, "c.json"); }),
             Catch::Contains("key 'num_experts_per_tok': 5 exceeds num_local_experts 4"));
  json qwen = recorded("qwen2_moe-tiny").at("config");
  c = qwen;
  c["use_sliding_window"] = true;
  CHECK_THAT(error_of([&] { model_from_hf_config(c, "c.json"); }),
             Catch::Contains("key 'use_sliding_window': true is not supported"));
  c = qwen;
  c["mlp_only_layers"] = {7};
  CHECK_THAT(error_of([&] { model_from_hf_config(c, "c.json"); }),
             Catch::Contains("key 'mlp_only_layers': entry 7 is not a layer index in [0, 3)"));
  c = qwen;
  c["model_type"] = "deepseek_v3";
  CHECK_THAT(error_of([&] { model_from_hf_config(c, "c.json"); }),
             Catch::Contains("unsupported model_type 'deepseek_v3'") &&
                 Catch::Contains("mixtral") && Catch::Contains("qwen2_moe"));
}
