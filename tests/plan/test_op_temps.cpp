// An op's temporaries are separate blocks in autograd's order (docs/schedule.md,
// "Op temporaries"): the loss backward below fp32 allocates nll_loss's fp32
// gradient A, log_softmax's fp32 gradient B, frees A, allocates the logits'
// bf16 gradient C, frees B; in fp32 (B is C): A, C, free A. Checked on the
// schedule's host-order memory actions of gpt2-tiny's loss.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "plan/models.h"
#include "plan/schedule.h"

using namespace shardscope;
using nlohmann::json;

namespace {

// The memory actions of the loss's temporaries and of the logits' gradient
// between the loss forward's launch and the loss backward's, as "+bytes"
// (alloc) and "-bytes" (free), in host order.
std::vector<std::string> loss_backward_actions(const plan::Graph& g, const plan::Schedule& s) {
  const int loss = static_cast<int>(g.ops.size()) - 1;
  const int logits = g.ops.back().inputs[0];
  std::vector<std::string> out;
  bool after_forward = false;
  for (const plan::Action& a : s.actions) {
    if (a.kind == plan::ActionKind::launch) {
      const plan::ScheduleOp& op = s.ops[static_cast<size_t>(a.op)];
      if (op.graph_op != loss) continue;
      if (op.kind == plan::OpKind::backward) break;
      after_forward = true;
      continue;
    }
    if (!after_forward || (a.kind != plan::ActionKind::alloc && a.kind != plan::ActionKind::free))
      continue;
    const plan::Buffer& b = s.buffers[static_cast<size_t>(a.buffer)];
    if ((b.role == plan::BufferRole::workspace && b.graph_op == loss) ||
        (b.role == plan::BufferRole::activation_grad && b.tensor == logits))
      out.push_back((a.kind == plan::ActionKind::alloc ? "+" : "-") + std::to_string(b.bytes));
  }
  return out;
}

}  // namespace

TEST_CASE("the loss backward allocates its temporaries one by one in autograd's order",
          "[plan][schedule]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  for (const std::string dtype : {"bf16", "fp32"}) {
    INFO(dtype);
    const json doc = {
        {"batch_size", 2}, {"seq_len", 16}, {"mixed_precision", {{"param_dtype", dtype}}}};
    const plan::Policy p = plan::policy_from_json(doc);
    const plan::World w = plan::validate_policy(p, g, 2);
    const plan::UnitPlan up = plan::build_units(g, p, w);
    const plan::Schedule s = plan::build_schedule(g, p, up, 0);
    REQUIRE(plan::check_schedule(g, up, s).empty());
    const plan::Op& loss = g.ops.back();
    const int64_t n = g.tensors[static_cast<size_t>(loss.inputs[0])].numel_at(s.workload);
    const std::string fp32 = std::to_string(4 * n);
    const std::vector<std::string> actions = loss_backward_actions(g, s);
    if (dtype == "bf16") {
      const std::string bf16 = std::to_string(2 * n);
      // A, B, free A, C (the result), free B.
      CHECK(actions ==
            std::vector<std::string>{"+" + fp32, "+" + fp32, "-" + fp32, "+" + bf16, "-" + fp32});
    } else {
      // A, C (the result), free A.
      CHECK(actions == std::vector<std::string>{"+" + fp32, "+" + fp32, "-" + fp32});
    }
  }
}
