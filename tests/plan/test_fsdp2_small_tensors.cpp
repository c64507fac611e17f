// Small tensors FSDP2 and foreach AdamW allocate that are no graph tensor,
// which the caching allocator's small pool sees (docs/schedule.md, "What the
// builder encodes"; the H200 snapshots in tests/reference/cuda/snapshots):
//   - mixed precision: the flat param-dtype copy of the shards that
//     _get_param_all_gather_inputs allocates before the all-gather output,
//     freed once the all-gather is issued;
//   - the optimizer step: exp_avg_sq_sqrt, one fp32 tensor per parameter's
//     shard, live through the step.
// Checked on the host-order memory actions of gpt2-tiny's schedule.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "planned.h"

using namespace shardscope;
using nlohmann::json;

namespace {

// Index in s.actions of the first action matching `pred`, from `from`; -1 if none.
template <class Pred>
int find_action(const plan::Schedule& s, size_t from, Pred pred) {
  for (size_t i = from; i < s.actions.size(); ++i)
    if (pred(s.actions[i])) return static_cast<int>(i);
  return -1;
}

bool allocates(const plan::Schedule& s, const plan::Action& a, plan::BufferRole role, int unit) {
  if (a.kind != plan::ActionKind::alloc) return false;
  const plan::Buffer& b = s.buffers[static_cast<size_t>(a.buffer)];
  return b.role == role && b.unit == unit;
}

}  // namespace

TEST_CASE("fsdp2 casts the shards into a flat buffer of their own before the all-gather output",
          "[plan][schedule]") {
  for (const std::string dtype : {"bf16", "fp32"}) {
    INFO(dtype);
    const json policy = {{"batch_size", 2},
                         {"seq_len", 16},
                         {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}},
                         {"mixed_precision", {{"param_dtype", dtype}}}};
    const test::Planned p = test::plan_model("gpt2-tiny", policy, 4);
    const plan::Schedule& s = p.schedule;
    REQUIRE(plan::check_schedule(p.graph, p.units, s).empty());
    REQUIRE(p.units.units.size() == 3);  // the root and gpt2-tiny's two blocks
    const int copy_in = s.stream_index(plan::StreamRole::ag_copy_in);
    REQUIRE(copy_in >= 0);
    int flat_buffers = 0;
    for (const plan::Buffer& b : s.buffers) flat_buffers += b.role == plan::BufferRole::lowp_shard;
    if (dtype == "fp32") {
      // No cast (FSDP2's param_dtype is None): the all-gather input is the
      // fp32 shard itself, a view; no allocation.
      CHECK(flat_buffers == 0);
      continue;
    }
    // Every unit's every all-gather (forward and backward) has one.
    int gathers = 0;
    for (const plan::ScheduleOp& op : s.ops) gathers += op.kind == plan::OpKind::all_gather;
    CHECK(flat_buffers == gathers);
    for (size_t u = 0; u < p.units.units.size(); ++u) {
      const int unit = static_cast<int>(u);
      INFO("unit " << p.units.units[u].name);
      const int flat = find_action(s, 0, [&](const plan::Action& a) {
        return allocates(s, a, plan::BufferRole::lowp_shard, unit);
      });
      REQUIRE(flat >= 0);
      const plan::Buffer& fb = s.buffers[static_cast<size_t>(s.actions[flat].buffer)];
      // This rank's shard in bf16, on the copy-in stream's pool.
      CHECK(fb.bytes == p.units.units[u].shard_numel * 2);
      CHECK(fb.dtype == plan::DType::bf16);
      CHECK(fb.stream == copy_in);
      // The all-gather output is the very next allocation.
      const int out = find_action(s, static_cast<size_t>(flat) + 1, [](const plan::Action& a) {
        return a.kind == plan::ActionKind::alloc;
      });
      REQUIRE(out >= 0);
      CHECK(allocates(s, s.actions[out], plan::BufferRole::ag_out, unit));
      // Freed after the all-gather's launch, before anything else is allocated.
      const int gather = find_action(s, static_cast<size_t>(out), [&](const plan::Action& a) {
        return a.kind == plan::ActionKind::launch &&
               s.ops[static_cast<size_t>(a.op)].kind == plan::OpKind::all_gather &&
               s.ops[static_cast<size_t>(a.op)].unit == unit;
      });
      const int freed = find_action(s, static_cast<size_t>(out), [&](const plan::Action& a) {
        return a.kind == plan::ActionKind::free && a.buffer == s.actions[flat].buffer;
      });
      const int next_alloc =
          find_action(s, static_cast<size_t>(out) + 1,
                      [](const plan::Action& a) { return a.kind == plan::ActionKind::alloc; });
      REQUIRE(gather >= 0);
      REQUIRE(freed >= 0);
      CHECK(gather < freed);
      CHECK((next_alloc < 0 || freed < next_alloc));
    }
  }
}

TEST_CASE("foreach AdamW holds one fp32 temporary per parameter shard through the fsdp2 step",
          "[plan][schedule]") {
  const json policy = {{"batch_size", 2}, {"seq_len", 16}};
  const test::Planned p = test::plan_model("gpt2-tiny", policy, 4);
  const plan::Schedule& s = p.schedule;
  REQUIRE(plan::check_schedule(p.graph, p.units, s).empty());
  std::vector<int> params;  // in allocation order
  int first_alloc = -1, last_free = -1, first_step = -1, last_step = -1;
  for (size_t i = 0; i < s.actions.size(); ++i) {
    const plan::Action& a = s.actions[i];
    if (a.kind == plan::ActionKind::launch) {
      if (s.ops[static_cast<size_t>(a.op)].kind != plan::OpKind::optimizer) continue;
      if (first_step < 0) first_step = static_cast<int>(i);
      last_step = static_cast<int>(i);
      continue;
    }
    if (a.kind != plan::ActionKind::alloc && a.kind != plan::ActionKind::free) continue;
    const plan::Buffer& b = s.buffers[static_cast<size_t>(a.buffer)];
    if (b.role != plan::BufferRole::optimizer_temp) continue;
    if (a.kind == plan::ActionKind::alloc) {
      if (first_alloc < 0) first_alloc = static_cast<int>(i);
      params.push_back(b.param);
      // rank 0's shard of the parameter: ceil(dim0 / 4) rows, fp32
      const plan::Param& param = p.graph.params[static_cast<size_t>(b.param)];
      INFO(param.name);
      CHECK(b.bytes == plan::fsdp2_shard_numel(param.shape, 4) * 4);
      CHECK(b.dtype == plan::DType::f32);
      CHECK(b.stream == s.stream_index(plan::StreamRole::compute));
    } else {
      last_free = static_cast<int>(i);
    }
  }
  // Every parameter once, in parameter order (the optimizer's list), all
  // allocated before the step and freed after it.
  std::vector<int> all(p.graph.params.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  CHECK(params == all);
  REQUIRE(first_step >= 0);
  CHECK(first_alloc < first_step);
  CHECK(last_step < last_free);

  // None for fsdp1 (its slices of the flat shard are not modelled) or SGD.
  for (const json& other : {json{{"flavor", "fsdp1"}}, json{{"optimizer", "sgd"}}}) {
    json q = policy;
    q.update(other);
    INFO(q.dump());
    const test::Planned o = test::plan_model("gpt2-tiny", q, 4);
    for (const plan::Buffer& b : o.schedule.buffers)
      CHECK(b.role != plan::BufferRole::optimizer_temp);
  }
}
