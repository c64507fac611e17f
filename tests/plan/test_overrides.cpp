// Per-unit policy overrides (policy key `overrides`, plan/overrides.h): strict
// reading, resolution against the units, and what they change in the
// schedule: all-gathers, bytes, dtypes, memory. Numbers worked out by hand
// for llama-tiny (C=64, I=176, 2 layers, 4 heads / 2 KV heads, V=512):
//   block  model.layers.i: 2x64 (norms) + 64x64 (q, o) x2 + 32x64 (k, v) x2
//          + 176x64 x3 (gate, up, down) = 46,208 elements; dim 0 even, so no
//          padding at N=2;
//   root   <root>: embed 512x64 + lm_head 512x64 + norm 64 = 65,600.
#include <catch2/catch.hpp>

#include <string>

#include "plan/error.h"
#include "plan/models.h"
#include "plan/overrides.h"
#include "plan/schedule.h"
#include "tests/plan/planned.h"

using namespace shardscope;
using nlohmann::json;

namespace {

constexpr int64_t kBlock = 46208, kRoot = 65600;

json llama_policy(json extra = json::object()) {
  json doc = {{"wrap", {{"type", "class"}, {"classes", {"LlamaDecoderLayer"}}}},
              {"batch_size", 2},
              {"seq_len", 16}};
  for (auto& [k, v] : extra.items()) doc[k] = v;
  return doc;
}

using test::Planned;

Planned plan_for(const json& doc, int64_t world) {
  Planned r = test::plan_model("llama-tiny", doc, world);
  const std::vector<std::string> errors = plan::check_schedule(r.graph, r.units, r.schedule);
  INFO((errors.empty() ? std::string() : errors.front()));
  REQUIRE(errors.empty());
  return r;
}

int count_ops(const plan::Schedule& s, plan::OpKind kind) {
  int n = 0;
  for (const plan::ScheduleOp& op : s.ops) n += op.kind == kind ? 1 : 0;
  return n;
}

// Bytes of transient buffers live at the end of forward: after the last
// forward launch and the frees that follow it, before backward allocates or
// launches anything.
int64_t live_at_forward_end(const plan::Schedule& s) {
  size_t last_fwd = 0;
  for (size_t i = 0; i < s.actions.size(); ++i)
    if (s.actions[i].kind == plan::ActionKind::launch &&
        s.ops[static_cast<size_t>(s.actions[i].op)].phase == plan::Phase::forward)
      last_fwd = i;
  int64_t live = 0;
  for (size_t i = 0; i < s.actions.size(); ++i) {
    const plan::Action& a = s.actions[i];
    if (i > last_fwd && a.kind != plan::ActionKind::free) break;
    if (a.kind == plan::ActionKind::alloc) live += s.buffers[static_cast<size_t>(a.buffer)].bytes;
    if (a.kind == plan::ActionKind::free) live -= s.buffers[static_cast<size_t>(a.buffer)].bytes;
  }
  return live;
}

std::string error_of(const json& doc, int64_t world = 2) {
  try {
    plan_for(doc, world);
  } catch (const plan::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("overrides: the last block not resharded (torchtitan), llama-tiny N=2", "[overrides]") {
  const Planned base = plan_for(llama_policy(), 2);
  REQUIRE(base.units.units.size() == 3);
  CHECK(base.units.units[2].name == "model.layers.1");
  CHECK(base.units.units[2].padded_numel == kBlock);
  CHECK(base.units.units[0].padded_numel == kRoot);
  const Planned last = plan_for(
      llama_policy(
          {{"overrides", {{{"units", {"model.layers.1"}}, {"reshard_after_forward", false}}}}}),
      2);
  // All-gathers: root once, blocks forward + backward = 5; the last block's
  // backward all-gather goes: 4.
  CHECK(count_ops(base.schedule, plan::OpKind::all_gather) == 5);
  CHECK(count_ops(last.schedule, plan::OpKind::all_gather) == 4);
  // Bytes per rank, (N-1)/N x 4 B x elements:
  //   base 1/2 x 4 x (65,600 + 2 x 2 x 46,208) = 500,864
  //   last 500,864 - 1/2 x 4 x 46,208         = 408,448
  // reduce-scatter unchanged: 1/2 x 4 x (65,600 + 2 x 46,208) = 316,032.
  const plan::CommBytes cb = plan::schedule_comm_bytes(base.schedule),
                        cl = plan::schedule_comm_bytes(last.schedule);
  CHECK(cb.all_gather == Approx(500864.0));
  CHECK(cl.all_gather == Approx(408448.0));
  CHECK(cl.reduce_scatter == Approx(316032.0));
  const plan::CommBytes closed = plan::closed_form_comm_bytes(last.graph, last.policy, last.units);
  CHECK(closed.all_gather == Approx(408448.0));
  CHECK(closed.reduce_scatter == Approx(316032.0));
  // The block's unsharded fp32 parameters stay alive from forward into
  // backward: 46,208 x 4 B more live when backward starts.
  CHECK(live_at_forward_end(last.schedule) - live_at_forward_end(base.schedule) == kBlock * 4);
}

TEST_CASE("overrides: an integer degree for one unit, fsdp2 N=4", "[overrides]") {
  // Block 1 keeps a 1/2 slice: its backward all-gather spans 2 ranks.
  // Padded at N=4: k/v rows 32 and norms 64 divide by 4: 46,208; root 65,600.
  //   base: 3/4 x 4 x (65,600 + 2 x 2 x 46,208)                 = 751,296
  //   k=2 on block 1: 751,296 - 3/4 x 4 x 46,208 + 1/2 x 4 x 46,208 = 705,088
  const Planned p = plan_for(
      llama_policy(
          {{"overrides", {{{"units", "model\\.layers\\.1"}, {"reshard_after_forward", 2}}}}}),
      4);
  const plan::CommBytes c = plan::schedule_comm_bytes(p.schedule);
  CHECK(c.all_gather == Approx(705088.0));
  CHECK(plan::closed_form_comm_bytes(p.graph, p.policy, p.units).all_gather == Approx(705088.0));
  int reshard_groups = 0;
  for (const plan::ProcessGroup& g : p.schedule.groups)
    reshard_groups += g.role == plan::GroupRole::reshard;
  CHECK(reshard_groups == 2);  // {0,1} and {2,3}
}

TEST_CASE("overrides: an fp32 root under bf16 blocks", "[overrides]") {
  const Planned p = plan_for(
      llama_policy({{"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}},
                    {"overrides",
                     {{{"units", {"<root>"}}, {"mixed_precision", {{"param_dtype", "fp32"}}}}}}}),
      2);
  const std::vector<plan::UnitSettings> us = plan::unit_settings(p.policy, p.units);
  CHECK(us[0].param_dtype == plan::DType::f32);
  CHECK(us[1].param_dtype == plan::DType::bf16);
  CHECK(us[1].reduce_dtype == plan::DType::f32);
  // All-gather: root 1/2 x 4 B x 65,600 = 131,200; blocks twice each at 2 B:
  // 2 x 2 x 1/2 x 2 x 46,208 = 184,832; total 316,032. Reduce-scatter all fp32:
  // 1/2 x 4 x (65,600 + 2 x 46,208) = 316,032.
  const plan::CommBytes c = plan::schedule_comm_bytes(p.schedule);
  CHECK(c.all_gather == Approx(316032.0));
  CHECK(c.reduce_scatter == Approx(316032.0));
  CHECK(plan::closed_form_comm_bytes(p.graph, p.policy, p.units).all_gather == Approx(316032.0));
  // Ops compute in their unit's dtype; a tensor takes its producer's: the
  // embedding output (root) is fp32, B x T x C x 4 = 2 x 16 x 64 x 4 = 8,192 B;
  // a block's output bf16, 4,096 B; the logits (lm_head, root) fp32.
  int checked = 0;
  for (const plan::Buffer& b : p.schedule.buffers) {
    if (b.role != plan::BufferRole::activation || b.micro != 0) continue;
    const plan::Tensor& t = p.graph.tensors[static_cast<size_t>(b.tensor)];
    if (t.name.find("embed_tokens") != std::string::npos && plan::is_floating(t.dtype)) {
      CHECK(b.dtype == plan::DType::f32);
      CHECK(b.bytes == 8192);
      ++checked;
    }
    if (t.name.find("layers.0.mlp.down_proj") != std::string::npos) {
      CHECK(b.dtype == plan::DType::bf16);
      CHECK(b.bytes == 4096);
      ++checked;
    }
  }
  CHECK(checked >= 2);
  for (const plan::ScheduleOp& op : p.schedule.ops)
    if (op.kind == plan::OpKind::forward)
      CHECK(op.dtype == (p.units.op_unit[static_cast<size_t>(op.graph_op)] == 0
                             ? plan::DType::f32
                             : plan::DType::bf16));
}

TEST_CASE("overrides: a later override wins for the keys it sets", "[overrides]") {
  const plan::Policy p = plan::policy_from_json(
      llama_policy({{"overrides",
                     {{{"units", "model\\.layers\\..*"},
                       {"reshard_after_forward", false},
                       {"mixed_precision", {{"param_dtype", "bf16"}}}},
                      {{"units", {"model.layers.1"}}, {"reshard_after_forward", true}}}}}));
  const plan::Graph g = plan::load_model("llama-tiny");
  const plan::UnitPlan up = plan::build_units(g, p, plan::validate_policy(p, g, 2));
  const std::vector<plan::UnitSettings> us = plan::unit_settings(p, up);
  CHECK(us[0].reshard_k == 1);  // the root: not resharded by default
  CHECK(us[1].reshard_k == 1);
  CHECK(us[2].reshard_k == 2);
  CHECK(us[1].param_dtype == plan::DType::bf16);
  CHECK(us[2].param_dtype == plan::DType::bf16);  // kept: the later one sets no mixed_precision
  CHECK(us[0].param_dtype == plan::DType::f32);   // the regex is a full match: not "<root>"
  // Round trip through JSON.
  const plan::Policy q = plan::policy_from_json(plan::policy_to_json(p));
  CHECK(plan::policy_to_json(q) == plan::policy_to_json(p));
  CHECK(plan::policy_to_json(q).at("overrides").size() == 2);
  CHECK(!plan::policy_to_json(plan::policy_from_json(llama_policy())).contains("overrides"));
}

TEST_CASE("overrides: errors name the override and the field", "[overrides][errors]") {
  auto with = [](json overrides, json extra = json::object()) {
    json doc = llama_policy(std::move(extra));
    doc["overrides"] = std::move(overrides);
    return doc;
  };
  SECTION("a regex that matches no unit names the index, the pattern and some units") {
    const std::string e =
        error_of(with({{{"units", "model.layers.0"}, {"reshard_after_forward", false}},
                       {{"units", "layers\\..*"}, {"reshard_after_forward", false}}}));
    CHECK_THAT(e,
               Catch::Contains("overrides[1].units: the regex \"layers\\\\..*\" matches no unit"));
    CHECK_THAT(e, Catch::Contains("<root>, model.layers.0, model.layers.1 (3 units)"));
  }
  SECTION("a listed name that is no unit") {
    CHECK_THAT(error_of(with({{{"units", {"model.norm"}}, {"reshard_after_forward", false}}})),
               Catch::Contains("overrides[0].units: 'model.norm' is not a unit"));
  }
  SECTION("wrong types") {
    CHECK_THAT(error_of(with({{{"units", 3}, {"reshard_after_forward", false}}})),
               Catch::Contains("overrides[0].units: expected a regex string or a list"));
    CHECK_THAT(
        error_of(with({{{"units", "<root>"}, {"reshard_after_forward", "no"}}})),
        Catch::Contains("overrides[0].reshard_after_forward: expected true, false or an integer"));
    CHECK_THAT(
        error_of(with({{{"units", "<root>"}, {"mixed_precision", {{"param_dtype", "fp8"}}}}})),
        Catch::Contains("overrides[0].mixed_precision.param_dtype: unknown dtype 'fp8'"));
    CHECK_THAT(error_of(with(json{{"units", "<root>"}})),
               Catch::Contains("overrides: expected an array"));
    CHECK_THAT(error_of(with({{{"units", "<root>"}}})),
               Catch::Contains("overrides[0]: sets nothing"));
    CHECK_THAT(error_of(with({{{"units", "<root>"}, {"forward_prefetch", 2}}})),
               Catch::Contains("overrides[0].forward_prefetch: unknown key"));
    CHECK_THAT(error_of(with({{{"units", "(("}, {"reshard_after_forward", false}}})),
               Catch::Contains("overrides[0].units: \"((\" is not a valid regex"));
  }
  SECTION("a value that does not apply to the flavor") {
    CHECK_THAT(
        error_of(
            with({{{"units", "<root>"}, {"reshard_after_forward", 2}}}, {{"flavor", "fsdp1"}})),
        Catch::Contains("overrides[0].reshard_after_forward: an integer applies to fsdp2 only"));
    CHECK_THAT(error_of(with({{{"units", "<root>"}, {"cpu_offload", true}}})),
               Catch::Contains("overrides[0].cpu_offload: per-unit CPU offload is not modelled"));
  }
  SECTION("a degree that does not divide N, and two partial degrees") {
    CHECK_THAT(error_of(with({{{"units", "model.layers.1"}, {"reshard_after_forward", 3}}}), 4),
               Catch::Contains("overrides[0].reshard_after_forward: 3 does not divide"));
    CHECK_THAT(error_of(with({{{"units", "model.layers.1"}, {"reshard_after_forward", 2}}},
                             {{"reshard_after_forward", 4}}),
                        8),
               Catch::Contains("reshard_after_forward degrees 4 and 2"));
  }
}
