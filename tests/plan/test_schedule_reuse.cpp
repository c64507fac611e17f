// Block reuse across streams (FSDP_SEMANTICS.md section 10, docs/schedule.md
// "fsdp2 buffer lifetimes"), and fsdp2's per-parameter unsharded gradients:
// fsdp1 frees with record_stream (pending_ops); fsdp2 frees at once after making the allocating
// stream wait for the other streams' uses; check_schedule rejects a schedule where a block freed to
// a pool could be reused before another stream is done with it.
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

Planned make(const json& doc, int64_t world) {
  return test::plan_model("gpt2-tiny", doc, world);
}

bool any_error_contains(const std::vector<std::string>& errors, const std::string& needle) {
  return std::any_of(errors.begin(), errors.end(),
                     [&](const std::string& e) { return e.find(needle) != std::string::npos; });
}

const json kFsdp2 = {{"flavor", "fsdp2"},
                     {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}},
                     {"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}}};

// Index of the action freeing `buffer`.
size_t free_action(const plan::Schedule& s, int buffer) {
  for (size_t i = 0; i < s.actions.size(); ++i)
    if (s.actions[i].kind == plan::ActionKind::free && s.actions[i].buffer == buffer) return i;
  FAIL("buffer " << buffer << " is never freed");
  return 0;
}

// The first op launched on `stream` after action `from`, or -1.
int next_launch_on(const plan::Schedule& s, size_t from, int stream) {
  for (size_t i = from + 1; i < s.actions.size(); ++i) {
    const plan::Action& a = s.actions[i];
    if (a.kind == plan::ActionKind::launch && s.ops[static_cast<size_t>(a.op)].stream == stream)
      return a.op;
  }
  return -1;
}

}  // namespace

TEST_CASE("fsdp2 frees no buffer with pending ops, fsdp1 frees its unsharded parameters so",
          "[schedule][reuse]") {
  const Planned two = make(kFsdp2, 4);
  REQUIRE(plan::check_schedule(two.graph, two.units, two.schedule).empty());
  int frees = 0;
  for (const plan::Action& a : two.schedule.actions) {
    if (a.kind != plan::ActionKind::free) continue;
    ++frees;
    CHECK(a.pending_ops.empty());
  }
  CHECK(frees > 50);

  json fsdp1 = kFsdp2;
  fsdp1["flavor"] = "fsdp1";
  const Planned one = make(fsdp1, 4);
  REQUIRE(plan::check_schedule(one.graph, one.units, one.schedule).empty());
  int unsharded_pending = 0;
  for (const plan::Action& a : one.schedule.actions)
    if (a.kind == plan::ActionKind::free &&
        one.schedule.buffers[static_cast<size_t>(a.buffer)].role == plan::BufferRole::unsharded &&
        !a.pending_ops.empty())
      ++unsharded_pending;
  // Every unit's unsharded flat parameter, in forward and in backward: 2
  // blocks + the root (never resharded after forward): 3 units, 5 frees.
  CHECK(unsharded_pending == 5);
}

TEST_CASE("fsdp2's copy-in and all-gather streams wait for the copy-out before reuse",
          "[schedule][reuse]") {
  const Planned p = make(kFsdp2, 4);
  const plan::Schedule& s = p.schedule;
  const int copy_in = s.stream_index(plan::StreamRole::ag_copy_in);
  const int ag = s.stream_index(plan::StreamRole::all_gather);
  REQUIRE(copy_in >= 0);
  REQUIRE(ag >= 0);
  int checked = 0;
  for (size_t b = 0; b < s.buffers.size(); ++b) {
    if (s.buffers[b].role != plan::BufferRole::ag_out) continue;
    CHECK(s.buffers[b].stream == copy_in);
    // The copy-out on compute that read this output.
    int copy_out = -1;
    for (size_t o = 0; o < s.ops.size(); ++o)
      if (s.ops[o].kind == plan::OpKind::copy_out &&
          std::count(s.ops[o].buffers.begin(), s.ops[o].buffers.end(), static_cast<int>(b)))
        copy_out = static_cast<int>(o);
    REQUIRE(copy_out >= 0);
    const size_t freed = free_action(s, static_cast<int>(b));
    for (const int stream : {copy_in, ag}) {
      const int next = next_launch_on(s, freed, stream);
      if (next < 0) continue;  // the last all-gather of the step
      CAPTURE(b, stream, next);
      const auto& waits = s.ops[static_cast<size_t>(next)].waits;
      CHECK(std::find(waits.begin(), waits.end(), copy_out) != waits.end());
      ++checked;
    }
  }
  CHECK(checked >= 8);
}

TEST_CASE("fsdp2 forward keeps the previous unit's all-gather output through the next copy-out",
          "[schedule][reuse]") {
  // FSDPParamGroup.wait_for_unshard (torch 2.9.1) clears the forward
  // all-gather state before the copy-out, but its local still holds it until
  // the function returns: the previous unit's output is freed after this
  // unit's copy-out, before this unit's first forward op.
  const Planned p = make(kFsdp2, 4);
  const plan::Schedule& s = p.schedule;
  int prev_out = -1, checked = 0;
  for (size_t i = 0; i < s.actions.size(); ++i) {
    const plan::Action& a = s.actions[i];
    if (a.kind != plan::ActionKind::launch) continue;
    const plan::ScheduleOp& op = s.ops[static_cast<size_t>(a.op)];
    if (op.kind != plan::OpKind::copy_out || op.phase != plan::Phase::forward) continue;
    const int out = op.buffers[0];
    REQUIRE(s.buffers[static_cast<size_t>(out)].role == plan::BufferRole::ag_out);
    if (prev_out >= 0) {
      const size_t freed = free_action(s, prev_out);
      CAPTURE(i, freed);
      CHECK(freed > i);  // live during this copy-out
      size_t next_forward = s.actions.size();
      for (size_t j = i + 1; j < s.actions.size(); ++j)
        if (s.actions[j].kind == plan::ActionKind::launch &&
            s.ops[static_cast<size_t>(s.actions[j].op)].kind == plan::OpKind::forward) {
          next_forward = j;
          break;
        }
      CHECK(freed < next_forward);
      ++checked;
    }
    prev_out = out;
  }
  CHECK(checked == 2);  // root -> h.0 -> h.1
}

TEST_CASE("fsdp2 backward releases a unit's all-gather output before prefetching the next",
          "[schedule][reuse]") {
  // FSDPParamGroup.pre_backward: wait_for_unshard (copy-out, release), then
  // _backward_prefetch. So in backward at most one all-gather output of a
  // block is live at a time besides the one being gathered.
  const Planned p = make(kFsdp2, 4);
  const plan::Schedule& s = p.schedule;
  int live = 0, most = 0;
  bool backward = false;
  for (const plan::Action& a : s.actions) {
    if (a.kind == plan::ActionKind::launch &&
        s.ops[static_cast<size_t>(a.op)].phase == plan::Phase::backward)
      backward = true;
    if (a.kind != plan::ActionKind::alloc && a.kind != plan::ActionKind::free) continue;
    if (s.buffers[static_cast<size_t>(a.buffer)].role != plan::BufferRole::ag_out) continue;
    live += a.kind == plan::ActionKind::alloc ? 1 : -1;
    if (backward) most = std::max(most, live);
  }
  CHECK(live == 0);
  CHECK(most == 1);
}

TEST_CASE("check_schedule rejects reuse of a freed block before another stream's use ends",
          "[schedule][reuse]") {
  Planned p = make(kFsdp2, 4);
  plan::Schedule& s = p.schedule;
  const int copy_in = s.stream_index(plan::StreamRole::ag_copy_in);
  // Drop the copy-out wait that the free of the first backward all-gather
  // output put on the next copy-in: the next output, allocated from the same
  // pool, could then be written while compute still copies the old one out.
  int mutated = -1;
  for (size_t b = 0; b < s.buffers.size() && mutated < 0; ++b) {
    if (s.buffers[b].role != plan::BufferRole::ag_out) continue;
    const size_t freed = free_action(s, static_cast<int>(b));
    const int next = next_launch_on(s, freed, copy_in);
    if (next < 0) continue;
    auto& waits = s.ops[static_cast<size_t>(next)].waits;
    const auto before = waits.size();
    waits.erase(
        std::remove_if(
            waits.begin(), waits.end(),
            [&](int w) { return s.ops[static_cast<size_t>(w)].kind == plan::OpKind::copy_out; }),
        waits.end());
    if (waits.size() != before) mutated = next;
  }
  REQUIRE(mutated >= 0);
  const std::vector<std::string> errors = plan::check_schedule(p.graph, p.units, s);
  CAPTURE(errors);
  CHECK(
      any_error_contains(errors, "after a free to that pool, without waiting for stream compute"));

  // The same schedule is safe again under record_stream semantics: the free
  // names the copy-out as pending.
  for (plan::Action& a : s.actions) {
    if (a.kind != plan::ActionKind::free) continue;
    const plan::Buffer& b = s.buffers[static_cast<size_t>(a.buffer)];
    if (b.role != plan::BufferRole::ag_out) continue;
    for (size_t o = 0; o < s.ops.size(); ++o)
      if (s.ops[o].stream != b.stream &&
          std::count(s.ops[o].buffers.begin(), s.ops[o].buffers.end(), a.buffer))
        a.pending_ops.push_back(static_cast<int>(o));
  }
  CHECK_FALSE(
      any_error_contains(plan::check_schedule(p.graph, p.units, s), "after a free to that pool"));
}

TEST_CASE("fsdp2 unsharded gradients are per parameter and appear with their first producer",
          "[schedule][grads]") {
  // FSDP2 parameters are separate tensors: autograd allocates each one's
  // .grad when the first backward op producing it runs. So Llama's untied
  // embedding gradient exists only at the end of backward, not from
  // lm_head's backward on (the root unit holds both). FSDP1's FlatParameter
  // has one gradient for the whole unit.
  const json wrap = {{"type", "class"}, {"classes", {"LlamaDecoderLayer"}}};
  Planned p;
  p.graph = plan::load_model("llama-tiny");
  p.policy = plan::policy_from_json({{"wrap", wrap}});
  p.units = plan::build_units(p.graph, p.policy, plan::validate_policy(p.policy, p.graph, 2));
  p.schedule = plan::build_schedule(p.graph, p.policy, p.units, 0);
  REQUIRE(plan::check_schedule(p.graph, p.units, p.schedule).empty());
  const int embed = p.graph.find_param("model.embed_tokens.weight");
  const int head = p.graph.find_param("lm_head.weight");
  REQUIRE(embed >= 0);
  REQUIRE(head >= 0);
  int pieces = 0;
  size_t embed_alloc = 0, head_alloc = 0, embed_backward = 0, head_backward = 0;
  for (size_t i = 0; i < p.schedule.actions.size(); ++i) {
    const plan::Action& a = p.schedule.actions[i];
    if (a.kind == plan::ActionKind::alloc) {
      const plan::Buffer& b = p.schedule.buffers[static_cast<size_t>(a.buffer)];
      if (b.role != plan::BufferRole::unsharded_grad) continue;
      ++pieces;
      REQUIRE(b.param >= 0);
      CHECK(b.bytes == p.graph.params[static_cast<size_t>(b.param)].numel() * 4);
      if (b.param == embed) embed_alloc = i;
      if (b.param == head) head_alloc = i;
    }
    if (a.kind == plan::ActionKind::launch) {
      const plan::ScheduleOp& op = p.schedule.ops[static_cast<size_t>(a.op)];
      if (op.kind != plan::OpKind::backward) continue;
      const std::string& name = p.graph.ops[static_cast<size_t>(op.graph_op)].name;
      if (name == "model.embed_tokens") embed_backward = i;
      if (name == "lm_head") head_backward = i;
    }
  }
  CHECK(pieces == static_cast<int>(p.graph.params.size()));
  CHECK(head_alloc < head_backward);
  CHECK(embed_alloc < embed_backward);
  // Nothing but the embedding's own backward comes between its gradient's
  // allocation and that op: every layer's backward ran before.
  CHECK(embed_alloc > head_backward);
  for (size_t i = embed_alloc + 1; i < embed_backward; ++i)
    CHECK(p.schedule.actions[i].kind != plan::ActionKind::launch);

  Planned one;
  one.graph = p.graph;
  one.policy = plan::policy_from_json({{"flavor", "fsdp1"}, {"wrap", wrap}});
  one.units =
      plan::build_units(one.graph, one.policy, plan::validate_policy(one.policy, one.graph, 2));
  one.schedule = plan::build_schedule(one.graph, one.policy, one.units, 0);
  int flat = 0;
  for (const plan::Buffer& b : one.schedule.buffers) {
    if (b.role != plan::BufferRole::unsharded_grad) continue;
    ++flat;
    CHECK(b.param == -1);
    CHECK(b.bytes == one.units.units[static_cast<size_t>(b.unit)].padded_numel * 4);
  }
  CHECK(flat == static_cast<int>(one.units.units.size()));
}
