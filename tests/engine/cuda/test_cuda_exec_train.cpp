// The CUDA engine against the CPU engine on gpt2-tiny at world size 1 (the
// real NCCL path with one rank): same initial weights, data and schedule, so
// fp32 losses agree within 1e-4 relative and final parameters within 1e-3
// relative L2 per tensor (the CUDA ops sum in another order); bf16 mixed
// precision within bf16's resolution (losses 2e-2 relative). The step issues
// nothing that blocks the host but its start and end: 2 host
// synchronisations per step without clipping or loss scaling.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "engine/cuda/exec/cuda_train.h"
#include "engine/exec/train.h"
#include "tests/engine/cuda/test_cuda_exec_util.h"

using namespace shardscope;

namespace {

struct Runs {
  engine::exec::RankRun cpu;
  engine::cuda::CudaRankRun gpu;
};

Runs train_both(const plan::Graph& g, const std::vector<std::string>& sets,
                engine::cuda::AttentionKernel attention = engine::cuda::AttentionKernel::simt,
                bool deterministic_attention = false) {
  engine::exec::TrainConfig base;
  base.graph = &g;
  base.policy = test::make_policy(sets);
  base.world_size = 1;
  base.steps = 2;
  base.model_name = "gpt2-tiny";
  engine::exec::TrainHooks hooks;
  hooks.gather_final_params = true;
  Runs runs;
  runs.cpu = engine::exec::train_threads(base, hooks).at(0);
  test::NcclWorldOne nccl(engine::exec::comm_groups(g, base.policy, 1));
  engine::cuda::CudaTrainConfig config;
  config.base = base;
  config.attention_kernel = attention;
  config.deterministic_attention = deterministic_attention;
  runs.gpu = engine::cuda::train_cuda_rank(config, nccl.comm, hooks);
  return runs;
}

const std::vector<std::string> kBase = {
    "batch_size=2", "seq_len=16", "wrap.type=class", "wrap.classes=[\"GPT2Block\"]",
    // SGD with momentum: AdamW turns the rounding noise of gradients that are
    // zero in exact arithmetic into full-size steps (test_train_equivalence.cpp).
    "optimizer={\"type\":\"sgd\",\"lr\":0.05,\"momentum\":0.9}"};

}  // namespace

TEST_CASE("cuda gpt2-tiny fp32 at world 1 matches the CPU engine", "[cuda][exec]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  const Runs r = train_both(g, kBase);
  REQUIRE(r.gpu.run.losses.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    INFO("step " << i << " cuda " << r.gpu.run.losses[i] << " cpu " << r.cpu.losses[i]);
    CHECK(std::abs(r.gpu.run.losses[i] - r.cpu.losses[i]) <= 1e-4 * std::abs(r.cpu.losses[i]));
  }
  // The initial loss of a uniform guess over the vocabulary, a sanity anchor.
  CHECK(std::abs(r.cpu.losses[0] - std::log(static_cast<double>(g.vocab_size))) < 0.5);
  REQUIRE(r.gpu.run.params.size() == g.params.size());
  for (size_t p = 0; p < g.params.size(); ++p) {
    INFO("parameter " << g.params[p].name);
    REQUIRE(r.gpu.run.params[p].size() == r.cpu.params[p].size());
    CHECK(test::rel_norm_diff(r.gpu.run.params[p], r.cpu.params[p]) <= 1e-3);
  }
  // Same plan, same allocator: the same peak and persistent bytes as the CPU engine.
  CHECK(r.gpu.run.peak_allocated_bytes == r.cpu.peak_allocated_bytes);
  CHECK(r.gpu.run.persistent_bytes == r.cpu.persistent_bytes);
  // Start and end of each step only: nothing in this policy needs the host.
  for (int syncs : r.gpu.host_syncs_per_step) CHECK(syncs == 2);
  CHECK(r.gpu.other_device_bytes == -1);  // not profiled
  // One trace event per op per step, on the schedule's lanes, source engine-cuda.
  const traces::Trace& t = r.gpu.run.trace;
  CHECK(t.meta.source == traces::Source::engine_cuda);
  REQUIRE(t.ranks.size() == 1);
  CHECK(t.ranks[0].steps.size() == 2);
  CHECK(t.ranks[0].device == 0);
  size_t ops_events = 0;
  for (const traces::Event& e : t.ranks[0].events)
    if (e.category != traces::Category::sync) ++ops_events;
  size_t cpu_events = 0;
  for (const traces::Event& e : r.cpu.trace.ranks[0].events)
    if (e.category != traces::Category::sync) ++cpu_events;
  CHECK(ops_events == cpu_events);
}

TEST_CASE("cuda gpt2-tiny bf16 mixed precision at world 1 matches the CPU engine", "[cuda][exec]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  std::vector<std::string> sets = kBase;
  sets.push_back("mixed_precision={\"param_dtype\":\"bf16\",\"reduce_dtype\":\"fp32\"}");
  const Runs r = train_both(g, sets);
  REQUIRE(r.gpu.run.losses.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    INFO("step " << i << " cuda " << r.gpu.run.losses[i] << " cpu " << r.cpu.losses[i]);
    CHECK(std::abs(r.gpu.run.losses[i] - r.cpu.losses[i]) <= 2e-2 * std::abs(r.cpu.losses[i]));
  }
  CHECK(r.gpu.run.peak_allocated_bytes == r.cpu.peak_allocated_bytes);
}

TEST_CASE("cuda gpt2-tiny with clipping and accumulation at world 1 matches the CPU engine",
          "[cuda][exec]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  std::vector<std::string> sets = kBase;
  sets.push_back("grad_clip_norm=0.5");
  sets.push_back("grad_accum_steps=2");
  const Runs r = train_both(g, sets);
  REQUIRE(r.gpu.run.losses.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    INFO("step " << i << " cuda " << r.gpu.run.losses[i] << " cpu " << r.cpu.losses[i]);
    CHECK(std::abs(r.gpu.run.losses[i] - r.cpu.losses[i]) <= 1e-4 * std::abs(r.cpu.losses[i]));
  }
  for (size_t p = 0; p < g.params.size(); ++p) {
    INFO("parameter " << g.params[p].name);
    CHECK(test::rel_norm_diff(r.gpu.run.params[p], r.cpu.params[p]) <= 1e-3);
  }
  // Clipping's .item(): one host wait per step on top of the start and the end
  // (world 1 has no scalar all-reduce: the wait is on the norm itself).
  for (int syncs : r.gpu.host_syncs_per_step) CHECK(syncs == 3);
}

TEST_CASE("cuda gpt2-tiny bf16 on the tensor-core attention kernels matches the CPU engine",
          "[cuda][exec]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  std::vector<std::string> sets = kBase;
  sets.push_back("mixed_precision={\"param_dtype\":\"bf16\",\"reduce_dtype\":\"fp32\"}");
  const Runs r = train_both(g, sets, engine::cuda::AttentionKernel::tensor_core);
  REQUIRE(r.gpu.run.losses.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    INFO("step " << i << " cuda " << r.gpu.run.losses[i] << " cpu " << r.cpu.losses[i]);
    CHECK(std::abs(r.gpu.run.losses[i] - r.cpu.losses[i]) <= 2e-2 * std::abs(r.cpu.losses[i]));
  }
  CHECK(r.gpu.run.peak_allocated_bytes == r.cpu.peak_allocated_bytes);
}

TEST_CASE("cuda executor refuses the tensor-core attention kernels on fp32, naming the op",
          "[cuda][exec]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  std::vector<std::string> sets = kBase;
  engine::exec::TrainConfig base;
  base.graph = &g;
  base.policy = test::make_policy(sets);
  base.world_size = 1;
  base.steps = 1;
  base.model_name = "gpt2-tiny";
  test::NcclWorldOne nccl(engine::exec::comm_groups(g, base.policy, 1));
  engine::cuda::CudaTrainConfig config;
  config.base = base;
  config.attention_kernel = engine::cuda::AttentionKernel::tensor_core;
  CHECK_THROWS_WITH(
      engine::cuda::train_cuda_rank(config, nccl.comm, {}),
      Catch::Contains("AttentionKernel::tensor_core needs bf16 or f16") && Catch::Contains("op '"));
}

TEST_CASE("cuda gpt2-tiny bf16 on cuDNN's fused attention matches the CPU engine, same peak",
          "[cuda][exec]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  std::vector<std::string> sets = kBase;
  sets.push_back("mixed_precision={\"param_dtype\":\"bf16\",\"reduce_dtype\":\"fp32\"}");
  const Runs r = train_both(g, sets, engine::cuda::AttentionKernel::cudnn, true);
  REQUIRE(r.gpu.run.losses.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    INFO("step " << i << " cuda " << r.gpu.run.losses[i] << " cpu " << r.cpu.losses[i]);
    CHECK(std::abs(r.gpu.run.losses[i] - r.cpu.losses[i]) <= 2e-2 * std::abs(r.cpu.losses[i]));
  }
  // cuDNN's workspace is carved from the stream workspace, outside the
  // caching allocator: the allocator's peak is the plan's, as on the CPU.
  CHECK(r.gpu.run.peak_allocated_bytes == r.cpu.peak_allocated_bytes);
  const auto& tools = r.gpu.run.trace.meta.tool_versions;
  REQUIRE(tools.count("attention_kernel") == 1);
  CHECK(tools.at("attention_kernel") == "cudnn (deterministic backward)");
  CHECK(tools.count("cudnn") == 1);
  // The deterministic backward: a second run gives the same losses, bit for bit.
  const Runs again = train_both(g, sets, engine::cuda::AttentionKernel::cudnn, true);
  CHECK(again.gpu.run.losses == r.gpu.run.losses);
}

TEST_CASE(
    "cuda llama-tiny bf16 on cuDNN's fused attention (RoPE outside it) matches the CPU engine",
    "[cuda][exec]") {
  const plan::Graph g = plan::load_model("llama-tiny");
  const std::vector<std::string> sets = {
      "batch_size=2", "seq_len=16", "optimizer={\"type\":\"sgd\",\"lr\":0.05,\"momentum\":0.9}",
      "mixed_precision={\"param_dtype\":\"bf16\",\"reduce_dtype\":\"fp32\"}"};
  const Runs r = train_both(g, sets, engine::cuda::AttentionKernel::cudnn);
  REQUIRE(r.gpu.run.losses.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    INFO("step " << i << " cuda " << r.gpu.run.losses[i] << " cpu " << r.cpu.losses[i]);
    CHECK(std::abs(r.gpu.run.losses[i] - r.cpu.losses[i]) <= 2e-2 * std::abs(r.cpu.losses[i]));
  }
  CHECK(r.gpu.run.peak_allocated_bytes == r.cpu.peak_allocated_bytes);
}

TEST_CASE("cuda executor refuses cuDNN attention on fp32, naming the op", "[cuda][exec]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  engine::exec::TrainConfig base;
  base.graph = &g;
  base.policy = test::make_policy(kBase);
  base.world_size = 1;
  base.steps = 1;
  base.model_name = "gpt2-tiny";
  test::NcclWorldOne nccl(engine::exec::comm_groups(g, base.policy, 1));
  engine::cuda::CudaTrainConfig config;
  config.base = base;
  config.attention_kernel = engine::cuda::AttentionKernel::cudnn;
  CHECK_THROWS_WITH(
      engine::cuda::train_cuda_rank(config, nccl.comm, {}),
      Catch::Contains("AttentionKernel::cudnn needs bf16 or f16") && Catch::Contains("op '"));
}
