// The CUDA engine trains the tiny mixture-of-experts configurations
// (tests/data/mixtral-tiny.json: 4 experts, top-2, renormalised weights,
// grouped-query Llama attention; qwen2_moe-tiny.json with 4 KV heads: raw
// top-k weights, a shared expert behind a sigmoid gate, a dense layer) at world 1 on the real
// NCCL path, against the CPU engine: same initial weights, data and plan.
// Both routings: forced (uniform and skewed balances, an expert with no
// tokens) and real top-k. fp32 losses within 1e-4 relative, final parameters
// within 1e-3 relative L2; bf16 losses within 2e-2; peak allocated equal to
// the CPU engine's and to the simulator's for the same rank plan; the
// per-expert token counts of the last step equal the CPU engine's (what
// `run --json` prints as moe_routing.layers[].measured). Under emulated
// peers (world 4) the peak equals the simulator's and the counts are this
// rank's alone.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "engine/cuda/exec/cuda_train.h"
#include "engine/exec/rank_plan.h"
#include "engine/exec/train.h"
#include "sim/simulator.h"
#include "tests/engine/cuda/test_cuda_exec_util.h"

using namespace shardscope;

namespace {

struct Model {
  const char* file;
  const char* layer;
};
const Model kModels[] = {{"mixtral-tiny", "MixtralDecoderLayer"},
                         {"qwen2_moe-tiny", "Qwen2MoeDecoderLayer"}};

// qwen2_moe-tiny with as many KV heads as heads: the GQA config repeats k and
// v before SDPA (attribute repeat_kv), which the CUDA engine refuses.
plan::Graph load(const Model& m) {
  const std::string path = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/" + m.file + ".json";
  if (std::string(m.file) != "qwen2_moe-tiny") return plan::load_model(path);
  std::ifstream in(path);
  nlohmann::json config = nlohmann::json::parse(in);
  config["num_key_value_heads"] = config["num_attention_heads"];
  return plan::model_from_hf_config(config, path + " (num_key_value_heads = 4)");
}

std::vector<std::string> base_sets(const Model& m) {
  return {"batch_size=2", "seq_len=12", "wrap.type=class",
          "wrap.classes=[\"" + std::string(m.layer) + "\"]",
          "optimizer={\"type\":\"sgd\",\"lr\":0.05,\"momentum\":0.9}"};
}

int64_t simulated_peak(const plan::Graph& g, const plan::Policy& policy, int world, int rank) {
  const engine::exec::RankPlan rp = engine::exec::build_rank_plan(g, policy, world, rank);
  return sim::simulate(g, rp.units, rp.schedule, sim::hardware_preset("h200-sxm"))
      .peak_allocated_bytes;
}

// bf16: losses only (parameters drift with the 16-bit GEMMs' rounding), and
// under top-k the counts' sums only: a logit one bf16 ulp apart can swap two
// near-tied experts between the engines.
void check_against_cpu(const Model& m, const std::vector<std::string>& extra, double loss_rel,
                       bool bf16) {
  const plan::Graph g = load(m);
  std::vector<std::string> sets = base_sets(m);
  sets.insert(sets.end(), extra.begin(), extra.end());
  engine::exec::TrainConfig base;
  base.graph = &g;
  base.policy = test::make_policy(sets);
  base.world_size = 1;
  base.steps = 2;
  base.model_name = m.file;
  engine::exec::TrainHooks hooks;
  hooks.gather_final_params = true;
  const engine::exec::RankRun cpu = engine::exec::train_threads(base, hooks).at(0);
  test::NcclWorldOne nccl(engine::exec::comm_groups(g, base.policy, 1));
  engine::cuda::CudaTrainConfig config;
  config.base = base;
  const engine::cuda::CudaRankRun gpu = engine::cuda::train_cuda_rank(config, nccl.comm, hooks);

  REQUIRE(gpu.run.losses.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    INFO("step " << i << " cuda " << gpu.run.losses[i] << " cpu " << cpu.losses[i]);
    CHECK(std::isfinite(gpu.run.losses[i]));
    CHECK(std::abs(gpu.run.losses[i] - cpu.losses[i]) <= loss_rel * std::abs(cpu.losses[i]));
  }
  if (!bf16) {
    REQUIRE(gpu.run.params.size() == g.params.size());
    for (size_t p = 0; p < g.params.size(); ++p) {
      INFO("parameter " << g.params[p].name);
      CHECK(test::rel_norm_diff(gpu.run.params[p], cpu.params[p]) <= 1e-3);
    }
  }
  CHECK(gpu.run.peak_allocated_bytes == cpu.peak_allocated_bytes);
  CHECK(gpu.run.peak_allocated_bytes == simulated_peak(g, base.policy, 1, 0));
  // Tokens per expert of the last step: [rank][router][expert], the CPU's.
  REQUIRE(cpu.expert_tokens.size() == 1);
  const bool topk = base.policy.moe_routing == plan::MoeRouting::topk;
  if (!bf16 || !topk) {
    CHECK(gpu.run.expert_tokens == cpu.expert_tokens);
  } else {
    REQUIRE(gpu.run.expert_tokens.size() == 1);
    REQUIRE(gpu.run.expert_tokens[0].size() == cpu.expert_tokens[0].size());
    for (const std::vector<int64_t>& layer : gpu.run.expert_tokens[0])
      CHECK(std::accumulate(layer.begin(), layer.end(), int64_t{0}) ==
            2 * 12 * 2 * base.policy.grad_accum_steps);  // B*T*k per micro-step
  }
  // Nothing in the MoE ops waits for the device: start and end of each step only.
  for (int syncs : gpu.host_syncs_per_step) CHECK(syncs == 2);
}

}  // namespace

TEST_CASE("cuda trains mixtral and qwen2_moe tiny like the CPU engine, forced routing",
          "[cuda][exec][moe]") {
  for (const Model& m : kModels) {
    INFO(m.file);
    check_against_cpu(m, {}, 1e-4, false);
    // Skewed: expert 3 gets no token (a zero-row dispatch and combine).
    check_against_cpu(m, {"token_balance={\"weights\": [0.5, 0.3, 0.2, 0.0]}"}, 1e-4, false);
    check_against_cpu(m, {"mixed_precision={\"param_dtype\":\"bf16\",\"reduce_dtype\":\"fp32\"}"},
                      2e-2, true);
  }
}

TEST_CASE("cuda trains mixtral and qwen2_moe tiny like the CPU engine, top-k routing",
          "[cuda][exec][moe]") {
  for (const Model& m : kModels) {
    INFO(m.file);
    check_against_cpu(m, {"moe_routing=topk"}, 1e-4, false);
    check_against_cpu(
        m, {"moe_routing=topk", "activation_checkpointing=\"full\"", "grad_accum_steps=2"}, 1e-4,
        false);
    check_against_cpu(m,
                      {"moe_routing=topk",
                       "mixed_precision={\"param_dtype\":\"bf16\",\"reduce_dtype\":\"fp32\"}"},
                      2e-2, true);
  }
}

TEST_CASE("cuda moe under emulated peers: peak equals the simulator's, this rank's counts",
          "[cuda][exec][moe]") {
  const int world = 4, rank = 1;
  for (const Model& m : kModels)
    for (const bool topk : {false, true}) {
      INFO(m.file << " topk " << topk);
      const plan::Graph g = load(m);
      std::vector<std::string> sets = base_sets(m);
      if (topk) sets.push_back("moe_routing=topk");
      engine::cuda::CudaTrainConfig config;
      config.base.graph = &g;
      config.base.policy = test::make_policy(sets);
      config.base.world_size = world;
      config.base.steps = 2;
      config.base.model_name = m.file;
      const engine::exec::RankPlan rp =
          engine::exec::build_rank_plan(g, config.base.policy, world, rank);
      engine::cuda::EmulatedCommunicator comm(
          rank, world, rp.groups, test::modelled_durations(sim::hardware_preset("h200-sxm")));
      const engine::cuda::CudaRankRun r = engine::cuda::train_cuda_rank(config, rp, comm, {});
      CHECK(r.run.peak_allocated_bytes == simulated_peak(g, config.base.policy, world, rank));
      REQUIRE(r.run.expert_tokens.size() == 1);     // emulated peers: this rank only
      REQUIRE(r.run.expert_tokens[0].size() == 2);  // routed layers
      for (const std::vector<int64_t>& layer : r.run.expert_tokens[0]) {
        REQUIRE(layer.size() == 4);
        CHECK(std::accumulate(layer.begin(), layer.end(), int64_t{0}) == 2 * 12 * 2);  // B*T*k
        if (!topk) CHECK(layer == std::vector<int64_t>{12, 12, 12, 12});
      }
    }
}
