// Mixture of experts in the CPU engine: the forced routing gives every expert
// exactly the stated balance's tokens, each token k distinct experts; real
// top-k routing is measured per rank and layer (counts sum to B*T*k per
// micro-step) and reported next to the assumption.
#include <catch2/catch.hpp>

#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "engine/exec/exec_moe_ops.h"
#include "engine/exec/train.h"
#include "plan/models.h"
#include "plan/policy.h"

using namespace shardscope;

namespace {

const std::string kData = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/";

std::vector<engine::exec::RankRun> train(const plan::Graph& g, const nlohmann::json& doc,
                                         int world) {
  engine::exec::TrainConfig c;
  c.graph = &g;
  c.policy = plan::policy_from_json(doc);
  c.world_size = world;
  c.steps = 2;
  return engine::exec::train_threads(c, {});
}

}  // namespace

TEST_CASE("forced routing: exact counts per sequence, k distinct experts per token",
          "[exec][moe]") {
  // T = 10, top-2 of 4: uniform 5 each; weights 0.5, 0.25, 0.125, 0.125: 10, 5, 2, 3.
  auto weights = std::make_shared<plan::TokenBalance>();
  weights->mode = plan::TokenBalance::Mode::weights;
  weights->cumulative = {0, 500000000, 750000000, 875000000, 1000000000};
  for (const plan::TokenBalance* b : {static_cast<const plan::TokenBalance*>(nullptr),
                                      static_cast<const plan::TokenBalance*>(weights.get())}) {
    const int64_t batch = 3, seq = 10, k = 2, experts = 4;
    std::vector<int64_t> idx(batch * seq * k, -1);
    engine::exec::forced_routing(batch, seq, experts, k, b, idx.data());
    for (int64_t s = 0; s < batch; ++s) {
      std::vector<int64_t> count(experts, 0);
      for (int64_t t = 0; t < seq; ++t) {
        std::set<int64_t> distinct;
        for (int64_t j = 0; j < k; ++j) {
          const int64_t e = idx[(s * seq + t) * k + j];
          REQUIRE(e >= 0);
          REQUIRE(e < experts);
          ++count[e];
          distinct.insert(e);
        }
        CHECK(distinct.size() == static_cast<size_t>(k));
      }
      for (int64_t e = 0; e < experts; ++e)
        CHECK(count[e] == plan::routed_tokens(seq, e, experts, k, b));
    }
  }
}

TEST_CASE("measured expert tokens: forced equals the assumption, top-k sums to B*T*k per rank",
          "[exec][moe]") {
  for (const char* file : {"mixtral-tiny.json", "qwen2_moe-tiny.json"}) {
    INFO(file);
    const plan::Graph g = plan::load_model(kData + file);
    const int64_t batch = 2, seq = 12, k = 2, accum = 2;
    nlohmann::json doc = {{"batch_size", batch},
                          {"seq_len", seq},
                          {"grad_accum_steps", accum},
                          {"token_balance", {{"weights", {0.5, 0.3, 0.2, 0.0}}}}};
    // Forced: every rank, every layer gets the stated counts: per sequence of
    // 24 slots floor(24 * (0.5, 0.8, 1.0, 1.0)) differences: 12, 7, 5, 0.
    const auto forced = train(g, doc, 2);
    const std::vector<int64_t> stated = {12 * batch * accum, 7 * batch * accum, 5 * batch * accum,
                                         0};
    for (const auto& run : forced) {
      REQUIRE(run.expert_tokens.size() == 2);  // ranks
      for (const auto& rank : run.expert_tokens) {
        REQUIRE(rank.size() == 2);  // routed layers (qwen2_moe: 0 and 2; layer 1 is dense)
        for (const auto& layer : rank) CHECK(layer == stated);
      }
    }
    // Real top-k: counts sum to B*T*k per micro-step on every rank and layer,
    // no expert above B*T per micro-step.
    doc["moe_routing"] = "topk";
    const auto topk = train(g, doc, 2);
    for (const auto& rank : topk[0].expert_tokens)
      for (const auto& layer : rank) {
        CHECK(std::accumulate(layer.begin(), layer.end(), int64_t{0}) == batch * seq * k * accum);
        for (int64_t n : layer) CHECK(n <= batch * seq * accum);
      }
    CHECK(topk[0].expert_tokens == topk[1].expert_tokens);  // gathered on every rank alike
  }
}
