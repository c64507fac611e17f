// The typed contract between plan/ and the executors: buffer roles and
// dtypes, op purposes and group roles, as the builder sets them and as
// check_schedule enforces them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "plan/models.h"
#include "plan/schedule.h"
#include "tests/plan/planned.h"

using namespace shardscope;
using nlohmann::json;

namespace {

using test::Planned;

Planned make(const std::string& model, const json& doc, int64_t world, int rank = 0) {
  return test::plan_model(model, doc, world, rank);
}

bool any_error_contains(const std::vector<std::string>& errors, const std::string& needle) {
  return std::any_of(errors.begin(), errors.end(),
                     [&](const std::string& e) { return e.find(needle) != std::string::npos; });
}

int first_buffer(const plan::Schedule& s, plan::BufferRole role) {
  for (size_t b = 0; b < s.buffers.size(); ++b)
    if (s.buffers[b].role == role) return static_cast<int>(b);
  return -1;
}

const json kBf16 = {{"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}}};

}  // namespace

TEST_CASE("buffer dtypes follow the policy's mixed precision by role", "[schedule][roles]") {
  // fsdp2, bf16 params, fp32 reduction, gpt2-tiny on 2 ranks.
  const Planned p = make("gpt2-tiny", kBf16, 2);
  REQUIRE(plan::check_schedule(p.graph, p.units, p.schedule).empty());
  int seen = 0;
  for (const plan::Buffer& b : p.schedule.buffers) {
    const bool int_tensor =
        b.tensor >= 0 && !plan::is_floating(p.graph.tensors[static_cast<size_t>(b.tensor)].dtype);
    switch (b.role) {
      case plan::BufferRole::param_shard:
      case plan::BufferRole::grad_shard:
      case plan::BufferRole::optimizer_state:
      case plan::BufferRole::rs_in:
      case plan::BufferRole::rs_out:
        CHECK(b.dtype == plan::DType::f32);
        ++seen;
        break;
      case plan::BufferRole::activation:
        // Statistics PyTorch keeps in fp32 (norm rstd, log-sum-exp,
        // log-probabilities) are f32 whatever the compute dtype.
        if (b.tensor >= 0 &&
            p.graph.tensors[static_cast<size_t>(b.tensor)].precision == plan::Precision::fp32) {
          CHECK(b.dtype == plan::DType::f32);
          ++seen;
          break;
        }
        CHECK(b.dtype == plan::DType::bf16);
        ++seen;
        break;
      case plan::BufferRole::ag_out:
      case plan::BufferRole::unsharded:
      case plan::BufferRole::unsharded_grad:
      case plan::BufferRole::activation_grad:
      case plan::BufferRole::workspace:
        CHECK(b.dtype == plan::DType::bf16);
        ++seen;
        break;
      case plan::BufferRole::input:
        CHECK(int_tensor);
        CHECK(b.dtype == plan::DType::i64);  // token ids and labels
        ++seen;
        break;
      default:
        break;
    }
  }
  CHECK(seen > 20);
  // The unsharded parameters of a unit: bf16, two bytes per element.
  const int u = first_buffer(p.schedule, plan::BufferRole::unsharded);
  REQUIRE(u >= 0);
  CHECK(p.schedule.buffers[static_cast<size_t>(u)].bytes % 2 == 0);
  CHECK(plan::buffer_name(p.graph, p.schedule.buffers[static_cast<size_t>(u)]).find(".unsharded") !=
        std::string::npos);
}

TEST_CASE("roles are named as the buffer names always were", "[schedule][roles]") {
  CHECK(std::string(plan::buffer_role_name(plan::BufferRole::activation)) == "act");
  CHECK(std::string(plan::buffer_role_name(plan::BufferRole::recomputed)) == "rc");
  CHECK(std::string(plan::buffer_role_name(plan::BufferRole::activation_grad)) == "grad");
  CHECK(std::string(plan::buffer_role_name(plan::BufferRole::accum_grad)) == "accum_grad");
  CHECK(plan::accumulates(plan::BufferRole::activation_grad));
  CHECK(plan::accumulates(plan::BufferRole::unsharded_grad));
  CHECK(plan::accumulates(plan::BufferRole::accum_grad));
  CHECK(plan::accumulates(plan::BufferRole::grad_shard));  // when allocated in the step
  CHECK_FALSE(plan::accumulates(plan::BufferRole::rs_out));
}

TEST_CASE("loss scaling and clipping: grad_scale purposes in order, scalar all-reduces typed",
          "[schedule][roles]") {
  json doc = {{"mixed_precision", {{"param_dtype", "fp16"}, {"reduce_dtype", "fp16"}}},
              {"loss_scale", "dynamic"},
              {"grad_clip_norm", 1.0}};
  const Planned p = make("gpt2-tiny", doc, 4);
  REQUIRE(plan::check_schedule(p.graph, p.units, p.schedule).empty());
  std::vector<plan::OpPurpose> scales, scalars;
  for (const plan::ScheduleOp& op : p.schedule.ops) {
    if (op.kind == plan::OpKind::grad_scale) scales.push_back(op.purpose);
    if (op.kind == plan::OpKind::all_reduce && op.buffers.empty()) {
      scalars.push_back(op.purpose);
      const plan::GroupRole role = p.schedule.groups[static_cast<size_t>(op.group)].role;
      CHECK(role == (op.purpose == plan::OpPurpose::inf_flag ? plan::GroupRole::world
                                                             : plan::GroupRole::shard));
    }
    if (op.kind != plan::OpKind::grad_scale && !(op.kind == plan::OpKind::all_reduce))
      CHECK(op.purpose == plan::OpPurpose::none);
  }
  CHECK(scales == std::vector<plan::OpPurpose>{plan::OpPurpose::unscale, plan::OpPurpose::clip});
  CHECK(scalars ==
        std::vector<plan::OpPurpose>{plan::OpPurpose::inf_flag, plan::OpPurpose::norm_sq});
}

TEST_CASE("hybrid sharding: every rank is in one group of each role", "[schedule][roles]") {
  // 8 ranks, shard groups of 4, 2 replicas; rank 5 is index 1 of shard1 and of replica1.
  const Planned p = make("gpt2-tiny", {{"shard_group_size", 4}}, 8, 5);
  REQUIRE(plan::check_schedule(p.graph, p.units, p.schedule).empty());
  std::vector<std::string> mine;
  for (const plan::ProcessGroup& g : p.schedule.groups)
    if (std::find(g.ranks.begin(), g.ranks.end(), 5) != g.ranks.end())
      mine.push_back(std::string(plan::group_role_name(g.role)) + ":" + g.name);
  CHECK(mine == std::vector<std::string>{"world:world", "shard:shard1", "replica:replica1"});
  for (const plan::ScheduleOp& op : p.schedule.ops) {
    if (op.kind == plan::OpKind::all_gather || op.kind == plan::OpKind::reduce_scatter)
      CHECK(p.schedule.groups[static_cast<size_t>(op.group)].role == plan::GroupRole::shard);
    if (op.kind == plan::OpKind::all_reduce && !op.buffers.empty())
      CHECK(p.schedule.groups[static_cast<size_t>(op.group)].role == plan::GroupRole::replica);
  }
}

TEST_CASE("check_schedule refuses roles that disagree with the rest", "[schedule][roles]") {
  const json clip = {{"grad_clip_norm", 1.0}};
  SECTION("a buffer whose category is not its role's") {
    Planned p = make("gpt2-tiny", kBf16, 2);
    const int b = first_buffer(p.schedule, plan::BufferRole::rs_in);
    REQUIRE(b >= 0);
    p.schedule.buffers[static_cast<size_t>(b)].category = plan::BufferCategory::activations;
    CHECK(any_error_contains(plan::check_schedule(p.graph, p.units, p.schedule),
                             "(rs_in) has category activations, its role's is comm_buffers"));
  }
  SECTION("a param-dtype buffer in another dtype than the others") {
    Planned p = make("gpt2-tiny", kBf16, 2);
    const int b = first_buffer(p.schedule, plan::BufferRole::unsharded);
    REQUIRE(b >= 0);
    p.schedule.buffers[static_cast<size_t>(b)].dtype = plan::DType::f16;
    CHECK(any_error_contains(plan::check_schedule(p.graph, p.units, p.schedule),
                             "(unsharded) is f16 where other param-dtype buffers of unit"));
  }
  SECTION("a persistent shard that is not fp32") {
    Planned p = make("gpt2-tiny", kBf16, 2);
    const int b = first_buffer(p.schedule, plan::BufferRole::grad_shard);
    p.schedule.buffers[static_cast<size_t>(b)].dtype = plan::DType::bf16;
    CHECK(any_error_contains(plan::check_schedule(p.graph, p.units, p.schedule),
                             "(grad_shard) is bf16, not f32"));
  }
  SECTION("an activation buffer without its tensor") {
    Planned p = make("gpt2-tiny", json::object(), 2);
    const int b = first_buffer(p.schedule, plan::BufferRole::activation);
    p.schedule.buffers[static_cast<size_t>(b)].tensor = -1;
    CHECK(any_error_contains(plan::check_schedule(p.graph, p.units, p.schedule),
                             "names no tensor against its role"));
  }
  SECTION("a grad_scale without a purpose") {
    Planned p = make("gpt2-tiny", clip, 2);
    for (plan::ScheduleOp& op : p.schedule.ops)
      if (op.kind == plan::OpKind::grad_scale) op.purpose = plan::OpPurpose::none;
    CHECK(any_error_contains(plan::check_schedule(p.graph, p.units, p.schedule),
                             "a grad_scale is an unscale or a clip"));
  }
  SECTION("a scalar all-reduce whose purpose names the wrong producer") {
    Planned p = make("gpt2-tiny", clip, 2);
    for (plan::ScheduleOp& op : p.schedule.ops)
      if (op.purpose == plan::OpPurpose::norm_sq) op.purpose = plan::OpPurpose::inf_flag;
    CHECK(any_error_contains(plan::check_schedule(p.graph, p.units, p.schedule),
                             "does not wait on the inf_check it reduces"));
  }
  SECTION("a purpose on an op kind that has none") {
    Planned p = make("gpt2-tiny", json::object(), 2);
    p.schedule.ops[0].purpose = plan::OpPurpose::clip;
    CHECK(any_error_contains(plan::check_schedule(p.graph, p.units, p.schedule),
                             "only grad_scale and scalar all-reduces have a purpose"));
  }
  SECTION("an all-gather on a group of the wrong role") {
    Planned p = make("gpt2-tiny", json::object(), 2);
    for (plan::ProcessGroup& g : p.schedule.groups)
      if (g.role == plan::GroupRole::shard) g.role = plan::GroupRole::replica;
    const std::vector<std::string> errors = plan::check_schedule(p.graph, p.units, p.schedule);
    CHECK(any_error_contains(errors, "(all_gather, none) runs on a replica group"));
  }
  SECTION("a rank in two groups of one role") {
    Planned p = make("gpt2-tiny", json::object(), 2);
    p.schedule.groups[0].role = plan::GroupRole::shard;  // the world and shard0 both hold rank 0
    const std::vector<std::string> errors = plan::check_schedule(p.graph, p.units, p.schedule);
    CHECK(any_error_contains(errors, "group 0 is not the world group"));
    CHECK(any_error_contains(errors, "is in two groups of role 'shard'"));
  }
}
