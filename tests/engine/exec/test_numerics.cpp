// Numerics of the executor: runs are bit-identical run to run; fp16 dynamic
// loss scaling skips the step and halves the scale on overflow; bf16 training
// follows fp32 within bf16's precision.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "engine/comm/shm_communicator.h"
#include "engine/exec/data.h"
#include "engine/exec/rank_executor.h"
#include "engine/exec/train.h"
#include "plan/models.h"
#include "plan/schedule.h"
#include "plan/units.h"

using namespace shardscope;

namespace {
engine::exec::TrainConfig config(const plan::Graph& g, const nlohmann::json& doc, int world,
                                 int steps) {
  engine::exec::TrainConfig c;
  c.graph = &g;
  c.policy = plan::policy_from_json(doc);
  c.world_size = world;
  c.steps = steps;
  return c;
}
}  // namespace

TEST_CASE("two identical runs give bit-identical losses and parameters", "[exec]") {
  const plan::Graph g = plan::load_model("llama-tiny");
  const nlohmann::json doc = {{"batch_size", 1},
                              {"seq_len", 16},
                              {"wrap", {{"type", "class"}, {"classes", {"LlamaDecoderLayer"}}}}};
  engine::exec::TrainHooks hooks;
  hooks.gather_final_params = true;
  const auto a = engine::exec::train_threads(config(g, doc, 2, 3), hooks);
  const auto b = engine::exec::train_threads(config(g, doc, 2, 3), hooks);
  CHECK(a[0].losses == b[0].losses);
  CHECK(a[0].params == b[0].params);
}

TEST_CASE("fp16 dynamic loss scaling: overflow skips the step and halves the scale", "[exec]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  const plan::Policy p = plan::policy_from_json(
      {{"batch_size", 1},
       {"seq_len", 8},
       {"mixed_precision", {{"param_dtype", "fp16"}, {"reduce_dtype", "fp16"}}},
       {"loss_scale", "dynamic"}});
  const plan::World w = plan::validate_policy(p, g, 1);
  const plan::UnitPlan units = plan::build_units(g, p, w);
  const plan::Schedule s = plan::build_schedule(g, p, units, 0);
  std::vector<engine::comm::Group> groups;
  for (const plan::ProcessGroup& grp : s.groups) groups.push_back({grp.name, grp.ranks});
  auto comms = engine::comm::make_thread_communicators(1, groups);
  const engine::exec::DataSource data(g, 0);
  engine::exec::RankExecutor exec(g, p, units, s, *comms[0], data);
  exec.init_weights(0);
  const int64_t shard = units.units[0].shard_numel;
  const std::vector<float> before(exec.param_shard(0), exec.param_shard(0) + shard);

  exec.loss_scaler().scale = 1e30;  // the scaled loss gradient overflows fp16
  const engine::exec::StepOutcome bad = exec.run_step(0);
  CHECK(bad.skipped);
  CHECK(exec.loss_scaler().scale == 0.5e30);
  CHECK(exec.optimizer_steps() == 0);
  CHECK(std::vector<float>(exec.param_shard(0), exec.param_shard(0) + shard) == before);
  CHECK(std::isfinite(bad.loss));  // the forward is unaffected by the scale

  exec.loss_scaler().scale = 1024;
  const engine::exec::StepOutcome good = exec.run_step(1);
  CHECK_FALSE(good.skipped);
  CHECK(exec.optimizer_steps() == 1);
  CHECK(exec.loss_scaler().scale == 1024);  // grows only after 2000 good steps
  CHECK(std::vector<float>(exec.param_shard(0), exec.param_shard(0) + shard) != before);
}

TEST_CASE("bf16 training follows fp32 within bf16 precision", "[exec]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  nlohmann::json doc = {{"batch_size", 2},
                        {"seq_len", 16},
                        {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}};
  const auto f32 = engine::exec::train_threads(config(g, doc, 2, 3), {});
  doc["mixed_precision"] = {{"param_dtype", "bf16"}};
  const auto bf16 = engine::exec::train_threads(config(g, doc, 2, 3), {});
  for (size_t i = 0; i < 3; ++i) {
    INFO("step " << i << " fp32 " << f32[0].losses[i] << " bf16 " << bf16[0].losses[i]);
    // bf16 keeps 8 bits of mantissa: relative error ~ 2^-8 per rounding.
    CHECK(std::abs(bf16[0].losses[i] - f32[0].losses[i]) <= 2e-2 * f32[0].losses[i]);
    CHECK(bf16[0].losses[i] != f32[0].losses[i]);  // the casts do round
  }
}

TEST_CASE("mlp float inputs stored 16-bit are rounded into their buffer", "[exec]") {
  // The MLP's input features are the only float graph input; under bf16/fp16
  // mixed precision their buffer holds 2-byte values. Losses follow fp32's
  // within the 16-bit precision (before the fix, 4-byte floats were written
  // into the 2-byte buffer: wrong features and a write past its end).
  const plan::Graph g = plan::load_model("mlp");
  const nlohmann::json base = {{"batch_size", 4}};
  const auto f32 = engine::exec::train_threads(config(g, base, 2, 2), {});
  for (const char* dtype : {"bf16", "fp16"}) {
    INFO(dtype);
    nlohmann::json doc = base;
    doc["mixed_precision"] = {{"param_dtype", dtype}};
    const auto low = engine::exec::train_threads(config(g, doc, 2, 2), {});
    REQUIRE(low[0].losses.size() == f32[0].losses.size());
    for (size_t i = 0; i < f32[0].losses.size(); ++i) {
      REQUIRE(std::isfinite(low[0].losses[i]));
      CHECK(low[0].losses[i] == Approx(f32[0].losses[i]).epsilon(3e-2));
    }
  }
}
