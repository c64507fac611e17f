// The CUDA engine trains the tiny family configs whose every op it runs
// (tests/data/: Gemma (scale, (1 + w) RMSNorm, GeGLU-tanh), Gemma 2, Phi-3, Qwen2 (q/k/v
// biases, grouped kv heads), Qwen3 (per-head q_norm / k_norm), OPT pre- and
// post-LN (learned positions from row 2, padding_idx)) at world size 1 on NCCL, against the CPU
// engine: same weights, data and schedule, so fp32 losses agree within 1e-4 relative and final
// parameters within 1e-3 relative L2 per tensor; bf16 mixed precision on the tensor-core attention
// kernels within 2e-2 relative on the losses (test_cuda_exec_train.cpp's tolerances). The engine's
// peak allocated bytes equal the CPU engine's and the simulator's prediction exactly (the ops add
// no allocator buffer: their scratch is the executor's stream workspace).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "engine/cuda/exec/cuda_train.h"
#include "engine/exec/train.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "sim/hardware.h"
#include "sim/simulator.h"
#include "tests/engine/cuda/test_cuda_exec_util.h"

using namespace shardscope;

namespace {

struct Family {
  const char* file;   // under tests/data/
  const char* layer;  // the decoder layer class, one FSDP unit each
};

// Gemma 2 (sliding windows, soft-capped attention and logits) and Phi-3
// (packed q|k|v with grouped KV heads under a window, packed gate_up) need
// the attention attributes of engine/cuda/ops/attention_*.cu as well.
const Family kFamilies[] = {
    {"gemma-tiny.json", "GemmaDecoderLayer"},   {"gemma2-tiny.json", "Gemma2DecoderLayer"},
    {"phi3-tiny.json", "Phi3DecoderLayer"},     {"qwen2-tiny.json", "Qwen2DecoderLayer"},
    {"qwen3-tiny.json", "Qwen3DecoderLayer"},   {"opt-tiny.json", "OPTDecoderLayer"},
    {"opt-postln-tiny.json", "OPTDecoderLayer"}};

void check_family(const Family& f, bool bf16, bool checkpointing) {
  INFO(f.file << (bf16 ? " bf16" : " fp32") << (checkpointing ? " checkpointed" : ""));
  const plan::Graph g =
      plan::load_model(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/" + f.file);
  std::vector<std::string> sets = {
      "batch_size=2", "seq_len=16", "wrap.type=class",
      std::string("wrap.classes=[\"") + f.layer + "\"]",
      // SGD with momentum (test_cuda_exec_train.cpp: AdamW amplifies rounding noise).
      "optimizer={\"type\":\"sgd\",\"lr\":0.05,\"momentum\":0.9}"};
  if (bf16) sets.push_back("mixed_precision={\"param_dtype\":\"bf16\",\"reduce_dtype\":\"fp32\"}");
  if (checkpointing) sets.push_back("activation_checkpointing=full");
  engine::exec::TrainConfig base;
  base.graph = &g;
  base.policy = test::make_policy(sets);
  base.world_size = 1;
  base.steps = 2;
  base.model_name = f.file;
  engine::exec::TrainHooks hooks;
  hooks.gather_final_params = true;
  const engine::exec::RankRun cpu = engine::exec::train_threads(base, hooks).at(0);
  test::NcclWorldOne nccl(engine::exec::comm_groups(g, base.policy, 1));
  engine::cuda::CudaTrainConfig config;
  config.base = base;
  config.attention_kernel =
      bf16 ? engine::cuda::AttentionKernel::tensor_core : engine::cuda::AttentionKernel::simt;
  const engine::cuda::CudaRankRun gpu = engine::cuda::train_cuda_rank(config, nccl.comm, hooks);

  REQUIRE(gpu.run.losses.size() == 2);
  const double loss_tol = bf16 ? 2e-2 : 1e-4;
  for (size_t i = 0; i < 2; ++i) {
    INFO("step " << i << " cuda " << gpu.run.losses[i] << " cpu " << cpu.losses[i]);
    CHECK(std::abs(gpu.run.losses[i] - cpu.losses[i]) <= loss_tol * std::abs(cpu.losses[i]));
  }
  // A uniform guess over the vocabulary to start with: the run did train this model.
  CHECK(std::abs(cpu.losses[0] - std::log(static_cast<double>(g.vocab_size))) < 1.0);
  if (!bf16) {
    REQUIRE(gpu.run.params.size() == g.params.size());
    for (size_t p = 0; p < g.params.size(); ++p) {
      INFO("parameter " << g.params[p].name);
      CHECK(test::rel_norm_diff(gpu.run.params[p], cpu.params[p]) <= 1e-3);
    }
  }
  const plan::World world = plan::validate_policy(base.policy, g, 1);
  const plan::UnitPlan units = plan::build_units(g, base.policy, world);
  const plan::Schedule s = plan::build_schedule(g, base.policy, units, 0);
  const sim::SimResult predicted = sim::simulate(g, units, s, sim::hardware_preset("h200-sxm"));
  CHECK(gpu.run.peak_allocated_bytes == predicted.peak_allocated_bytes);
  CHECK(gpu.run.peak_allocated_bytes == cpu.peak_allocated_bytes);
}

}  // namespace

TEST_CASE("cuda Gemma Qwen and OPT tiny fp32 at world 1 match the CPU engine and the simulator",
          "[cuda][exec][families]") {
  for (const Family& f : kFamilies) check_family(f, false, false);
}

TEST_CASE("cuda Gemma Qwen and OPT tiny bf16 on tensor-core attention match the CPU engine",
          "[cuda][exec][families]") {
  for (const Family& f : kFamilies) check_family(f, true, false);
}

TEST_CASE("cuda Gemma Qwen and OPT tiny with full checkpointing match the CPU engine",
          "[cuda][exec][families]") {
  // Recompute runs every new op's forward a second time, into fresh buffers.
  for (const Family& f : kFamilies) check_family(f, false, true);
}
