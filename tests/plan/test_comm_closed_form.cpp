// Communication volume: the closed forms of FSDP_SEMANTICS.md section 9
// evaluated by hand for specific cases, and against the schedule.
#include <catch2/catch.hpp>

#include "plan/models.h"
#include "plan/schedule.h"
#include "tests/plan/toy_graph.h"

using namespace shardscope;
using nlohmann::json;

namespace {

plan::CommBytes comm(const plan::Graph& g, const json& doc, int64_t world) {
  plan::Policy p = plan::policy_from_json(doc);
  plan::World w = plan::validate_policy(p, g, world);
  plan::UnitPlan up = plan::build_units(g, p, w);
  plan::Schedule s = plan::build_schedule(g, p, up, 0);
  plan::CommBytes closed = plan::closed_form_comm_bytes(g, p, up);
  plan::CommBytes got = plan::schedule_comm_bytes(s);
  REQUIRE(got.all_gather == Approx(closed.all_gather));
  REQUIRE(got.reduce_scatter == Approx(closed.reduce_scatter));
  REQUIRE(got.all_reduce == Approx(closed.all_reduce).margin(1e-9));
  return got;
}

}  // namespace

TEST_CASE("toy model, class Block, fsdp2, N=2, fp32: bytes worked out by hand", "[comm]") {
  // Units (N=2): root shard 25 (padded 50), blocks shard 10 (padded 20).
  // All-gather: root once, blocks twice (forward + backward):
  //   (1/2) x 4 B x (50 + 2x20 + 2x20) = 260 B.
  // Reduce-scatter: (1/2) x 4 B x (50 + 20 + 20) = 180 B.
  plan::CommBytes c =
      comm(test::toy_graph(), {{"wrap", {{"type", "class"}, {"classes", {"Block"}}}}}, 2);
  CHECK(c.all_gather == Approx(260.0));
  CHECK(c.reduce_scatter == Approx(180.0));
  CHECK(c.all_reduce == 0.0);
}

TEST_CASE("toy model, bf16 params, fp32 reduce, no reshard: one all-gather pass", "[comm]") {
  // All-gather in bf16, one pass: (1/2) x 2 B x 90 = 90 B. Reduce-scatter fp32: 180 B.
  plan::CommBytes c =
      comm(test::toy_graph(),
           {{"wrap", {{"type", "class"}, {"classes", {"Block"}}}},
            {"reshard_after_forward", false},
            {"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}}},
           2);
  CHECK(c.all_gather == Approx(90.0));
  CHECK(c.reduce_scatter == Approx(180.0));
}

TEST_CASE("toy model hybrid: world 4 = 2 shard x 2 replicas adds the replica all-reduce",
          "[comm]") {
  // Shard groups of N=2, R=2: all-reduce 2(R-1)/R x 4 B x shard (25 + 10 + 10) = 180 B.
  plan::CommBytes c =
      comm(test::toy_graph(),
           {{"wrap", {{"type", "class"}, {"classes", {"Block"}}}}, {"shard_group_size", 2}}, 4);
  CHECK(c.all_gather == Approx(260.0));
  CHECK(c.reduce_scatter == Approx(180.0));
  CHECK(c.all_reduce == Approx(180.0));
}

TEST_CASE("gpt2-small, fsdp2, world 8, fp32, one unit: (N-1)/N x 4 x Psi each way", "[comm]") {
  // One unit (the root, not resharded): one all-gather pass. Psi padded:
  // every dim-0 of GPT-2 small divides by 8 except ... computed by the units.
  const plan::Graph g = plan::load_model("gpt2-small");
  plan::Policy p = plan::policy_from_json(json::object());
  plan::World w = plan::validate_policy(p, g, 8);
  plan::UnitPlan up = plan::build_units(g, p, w);
  const double psi = static_cast<double>(up.total_padded_numel());
  CHECK(psi >= static_cast<double>(g.params_total()));
  plan::CommBytes c = comm(g, json::object(), 8);
  CHECK(c.all_gather == Approx(7.0 / 8.0 * 4.0 * psi));
  CHECK(c.reduce_scatter == Approx(7.0 / 8.0 * 4.0 * psi));
}

TEST_CASE("persistent bytes: 16 Psi/N with AdamW, 12 Psi/N with SGD momentum, 8 with plain SGD",
          "[comm][memory]") {
  // zero_grad(set_to_none=False) keeps the 4 Psi/N of gradients between
  // steps; PyTorch's default set_to_none=True frees them: 12, 8 and 4.
  const plan::Graph g = test::toy_graph();
  for (const bool set_to_none : {false, true}) {
    for (auto [opt, per_elem] : std::vector<std::pair<json, int64_t>>{
             {"adamw", 16}, {{{"type", "sgd"}, {"momentum", 0.9}}, 12}, {"sgd", 8}}) {
      CAPTURE(set_to_none, opt);
      plan::Policy p =
          plan::policy_from_json({{"optimizer", opt}, {"zero_grad_set_to_none", set_to_none}});
      plan::World w = plan::validate_policy(p, g, 2);
      plan::UnitPlan up = plan::build_units(g, p, w);
      plan::Schedule s = plan::build_schedule(g, p, up, 0);
      // One unit of 90 elements over 2 ranks, fsdp2 per-parameter padding:
      // emb 5x4=20, fc.w 2x4=8 (x2), fc.b 2 (x2), head.bias 5 -> shard 45.
      CHECK(up.units[0].shard_numel == 45);
      CHECK(s.persistent_device_bytes() == (per_elem - (set_to_none ? 4 : 0)) * 45);
      // The gradient shard exists in the step either way: allocated by the
      // reduce-scatter (fp32) and freed after the optimizer when transient.
      int grads = 0;
      for (const plan::Buffer& b : s.buffers)
        if (b.role == plan::BufferRole::grad_shard) {
          ++grads;
          CHECK(b.persistent == !set_to_none);
          CHECK(b.bytes == 4 * 45);
        }
      CHECK(grads == 1);
    }
  }
}

TEST_CASE("zero_grad_set_to_none: the reduce-scatter writes the new fp32 gradient shard",
          "[comm][memory]") {
  const plan::Graph g = test::toy_graph();
  for (const char* reduce : {"fp32", "bf16"}) {
    CAPTURE(reduce);
    plan::Policy p = plan::policy_from_json(
        {{"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", reduce}}}});
    plan::World w = plan::validate_policy(p, g, 2);
    plan::UnitPlan up = plan::build_units(g, p, w);
    plan::Schedule s = plan::build_schedule(g, p, up, 0);
    REQUIRE(plan::check_schedule(g, up, s).empty());
    int rs = -1;
    for (size_t o = 0; o < s.ops.size(); ++o)
      if (s.ops[o].kind == plan::OpKind::reduce_scatter) rs = static_cast<int>(o);
    REQUIRE(rs >= 0);
    const plan::Buffer& out =
        s.buffers[static_cast<size_t>(s.ops[static_cast<size_t>(rs)].buffers.back())];
    int accumulates = 0, frees_after_optimizer = 0;
    bool optimized = false;
    for (const plan::Action& a : s.actions) {
      if (a.kind == plan::ActionKind::launch) {
        const plan::ScheduleOp& op = s.ops[static_cast<size_t>(a.op)];
        // Into the gradient shard (the toy's tied emb also sums its two
        // unsharded gradients with a grad_accumulate: not counted).
        accumulates +=
            op.kind == plan::OpKind::grad_accumulate &&
            s.buffers[static_cast<size_t>(op.buffers.back())].role == plan::BufferRole::grad_shard;
        optimized = optimized || op.kind == plan::OpKind::optimizer;
      }
      if (a.kind == plan::ActionKind::free && optimized &&
          s.buffers[static_cast<size_t>(a.buffer)].role == plan::BufferRole::grad_shard)
        ++frees_after_optimizer;
    }
    CHECK(frees_after_optimizer == 1);
    if (std::string(reduce) == "fp32") {
      // FSDP2's reduce_output is the gradient: no rs_out, no accumulation.
      CHECK(out.role == plan::BufferRole::grad_shard);
      CHECK(accumulates == 0);
    } else {
      // bf16 reduce_output, then .to(fp32) into the new gradient.
      CHECK(out.role == plan::BufferRole::rs_out);
      CHECK(out.dtype == plan::DType::bf16);
      CHECK(accumulates == 1);
    }
  }
}
