// Step-schedule invariants over the whole policy grid, and hand-checked
// behaviours of each knob.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "plan/activations.h"
#include "plan/error.h"
#include "plan/models.h"
#include "plan/schedule.h"
#include "plan/schedule_io.h"
#include "plan/workload_sizes.h"
#include "tests/plan/planned.h"
#include "tests/plan/schedule_grid.h"
#include "tests/plan/toy_graph.h"

using namespace shardscope;
using nlohmann::json;

namespace {

// The shared fixture with every rank's schedule (ranks[r]: rank r's), or rank 0's only.
struct Planned : test::Planned {
  std::vector<plan::Schedule> ranks;
};

Planned make(const plan::Graph& g, const json& doc, int64_t world, bool all_ranks = false) {
  Planned p{test::plan_units(g, doc, world), {}};
  const int n = all_ranks ? static_cast<int>(world) : 1;
  for (int r = 0; r < n; ++r)
    p.ranks.push_back(plan::build_schedule(p.graph, p.policy, p.units, r));
  return p;
}

std::string describe(const json& doc) {
  return doc.dump();
}

// (group name, seq, kind, bytes) of every collective, in issue order.
std::vector<std::string> collective_signature(const plan::Schedule& s) {
  std::vector<std::string> out;
  for (const plan::Action& a : s.actions) {
    if (a.kind != plan::ActionKind::launch) continue;
    const plan::ScheduleOp& op = s.ops[a.op];
    if (!plan::is_collective(op.kind)) continue;
    out.push_back(std::string(plan::op_kind_name(op.kind)) + "@" + std::to_string(op.seq) + ":" +
                  std::to_string(op.bytes));
  }
  return out;
}

int count_ops(const plan::Schedule& s, plan::OpKind kind, int unit = -2) {
  int n = 0;
  for (const plan::ScheduleOp& op : s.ops)
    if (op.kind == kind && (unit == -2 || op.unit == unit)) ++n;
  return n;
}

// Position in host order of each op's launch.
std::vector<int> launch_positions(const plan::Schedule& s) {
  std::vector<int> pos(s.ops.size(), -1);
  for (size_t i = 0; i < s.actions.size(); ++i)
    if (s.actions[i].kind == plan::ActionKind::launch) pos[s.actions[i].op] = static_cast<int>(i);
  return pos;
}

void check_grid_on(const std::string& model, const std::string& block_class) {
  const plan::Graph g = plan::load_model(model);
  const int64_t world = 4;
  int checked = 0;
  for (const json& doc : test::schedule_policy_grid(block_class)) {
    INFO(model << " " << describe(doc));
    Planned p = make(g, doc, world, /*all_ranks=*/true);
    for (const plan::Schedule& s : p.ranks) {
      // Gathered before use, no use after free, transients freed, sequences.
      std::vector<std::string> errors = plan::check_schedule(p.graph, p.units, s);
      INFO("rank " << s.rank << (errors.empty() ? std::string() : ": " + errors[0]));
      REQUIRE(errors.empty());
    }
    // Collectives match across ranks (same group sequence, kinds and sizes).
    for (size_t r = 1; r < p.ranks.size(); ++r)
      REQUIRE(collective_signature(p.ranks[r]) == collective_signature(p.ranks[0]));
    // Communication bytes per rank equal the closed forms.
    plan::CommBytes got = plan::schedule_comm_bytes(p.ranks[0]);
    plan::CommBytes want = plan::closed_form_comm_bytes(p.graph, p.policy, p.units);
    REQUIRE(got.all_gather == Approx(want.all_gather).epsilon(1e-12));
    REQUIRE(got.reduce_scatter == Approx(want.reduce_scatter).epsilon(1e-12));
    REQUIRE(got.all_reduce == Approx(want.all_reduce).epsilon(1e-12).margin(1e-9));
    // Only sharded parameters, optimizer state and (zero_grad without
    // set_to_none, or offloaded to the host) sharded gradients persist:
    // 12 or 16 bytes per shard element with AdamW (FSDP_SEMANTICS.md section 9).
    const int64_t persistent =
        p.ranks[0].persistent_device_bytes() + p.ranks[0].persistent_host_bytes();
    const bool grads_persist = !p.policy.zero_grad_set_to_none || p.policy.cpu_offload;
    REQUIRE(persistent == (grads_persist ? 16 : 12) * p.units.total_shard_numel());
    ++checked;
  }
  CHECK(checked == 360);  // 180 per flavor, see schedule_grid.h
}

}  // namespace

TEST_CASE("schedule invariants over the policy grid: gpt2-tiny", "[schedule][grid]") {
  check_grid_on("gpt2-tiny", "GPT2Block");
}

TEST_CASE("schedule invariants over the policy grid: llama-tiny", "[schedule][grid]") {
  check_grid_on("llama-tiny", "LlamaDecoderLayer");
}

TEST_CASE("gradient accumulation, clipping, hybrid and DDP keep the invariants",
          "[schedule][grid]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  const std::vector<std::pair<json, int64_t>> cases = {
      {{{"grad_accum_steps", 3}, {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}}, 4},
      {{{"flavor", "fsdp1"},
        {"grad_accum_steps", 2},
        {"mixed_precision", {{"param_dtype", "bf16"}}},
        {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}},
       4},
      {{{"grad_clip_norm", 1.0}, {"shard_group_size", 2}}, 8},
      {{{"shard_group_size", 1}}, 4},
      {{{"shard_group_size", 1}, {"mixed_precision", {{"param_dtype", "bf16"}}}}, 4},
      {{{"flavor", "fsdp1"}, {"shard_group_size", 1}, {"cpu_offload", true}}, 2},
      {{{"shard_group_size", 2},
        {"reshard_after_forward", 2},
        {"grad_accum_steps", 2},
        {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}},
       8},
      {{{"mixed_precision", {{"param_dtype", "fp16"}}},
        {"loss_scale", "dynamic"},
        {"grad_clip_norm", 0.5}},
       4},
      {{{"forward_prefetch", 2}, {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}}, 4},
      {{{"flavor", "fsdp1"},
        {"forward_prefetch", true},
        {"limit_all_gathers", false},
        {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}},
       4},
      {{{"activation_checkpointing", {{"every", 2}}},
        {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}},
       4},
      {{{"grad_accum_steps", 2}}, 1},
  };
  for (const auto& [doc, world] : cases) {
    INFO(describe(doc) << " world " << world);
    Planned p = make(g, doc, world, true);
    for (const plan::Schedule& s : p.ranks) {
      std::vector<std::string> errors = plan::check_schedule(p.graph, p.units, s);
      INFO("rank " << s.rank << (errors.empty() ? std::string() : ": " + errors[0]));
      REQUIRE(errors.empty());
    }
    for (size_t r = 1; r < p.ranks.size(); ++r) {
      // Ranks of different shard groups use different groups but the same sequence.
      REQUIRE(collective_signature(p.ranks[r]).size() == collective_signature(p.ranks[0]).size());
    }
    plan::CommBytes got = plan::schedule_comm_bytes(p.ranks[0]);
    plan::CommBytes want = plan::closed_form_comm_bytes(p.graph, p.policy, p.units);
    REQUIRE(got.all_gather == Approx(want.all_gather).epsilon(1e-12));
    REQUIRE(got.reduce_scatter == Approx(want.reduce_scatter).epsilon(1e-12));
    REQUIRE(got.all_reduce == Approx(want.all_reduce).epsilon(1e-12).margin(1e-9));
  }
}

TEST_CASE("the root is gathered once per micro-step and never resharded after forward",
          "[schedule]") {
  Planned p = make(plan::load_model("gpt2-tiny"),
                   {{"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}}, 4);
  const plan::Schedule& s = p.ranks[0];
  CHECK(count_ops(s, plan::OpKind::all_gather, 0) == 1);
  // Each of the 2 blocks: forward and backward all-gather.
  CHECK(count_ops(s, plan::OpKind::all_gather, 1) == 2);
  CHECK(count_ops(s, plan::OpKind::all_gather, 2) == 2);
  // One reduce-scatter per unit.
  CHECK(count_ops(s, plan::OpKind::reduce_scatter) == 3);
}

TEST_CASE("reshard_after_forward=false gathers each unit once", "[schedule]") {
  Planned p = make(
      plan::load_model("gpt2-tiny"),
      {{"reshard_after_forward", false}, {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}},
      4);
  CHECK(count_ops(p.ranks[0], plan::OpKind::all_gather) == 3);
}

TEST_CASE("reshard_after_forward=2 runs the backward all-gather over 2 ranks", "[schedule]") {
  Planned p = make(
      plan::load_model("gpt2-tiny"),
      {{"reshard_after_forward", 2}, {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}}, 4);
  const plan::Schedule& s = p.ranks[0];
  std::multiset<size_t> group_sizes;
  for (const plan::ScheduleOp& op : s.ops)
    if (op.kind == plan::OpKind::all_gather) group_sizes.insert(s.groups[op.group].ranks.size());
  // root + 2 forward gathers over 4 ranks; 2 backward gathers over 2 ranks.
  CHECK(group_sizes == std::multiset<size_t>{2, 2, 4, 4, 4});
  CHECK(count_ops(s, plan::OpKind::reshard_copy) == 2);
}

TEST_CASE("backward prefetch modes order the next all-gather around the current backward",
          "[schedule][prefetch]") {
  // fsdp1, 2 blocks: in backward, unit 2 (blocks.1) runs first, then unit 1.
  // pre:  unit 1's all-gather is issued before unit 2's first backward op;
  // post: after unit 2's last backward op (and its free), before unit 1's first;
  // none: only when unit 1's backward starts, i.e. also after unit 2's ops.
  for (const char* mode : {"pre", "post", "none"}) {
    INFO(mode);
    Planned p = make(plan::load_model("gpt2-tiny"),
                     {{"flavor", "fsdp1"},
                      {"backward_prefetch", mode},
                      {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}},
                     4);
    const plan::Schedule& s = p.ranks[0];
    std::vector<int> pos = launch_positions(s);
    int ag1 = -1, first_bwd2 = -1, last_bwd2 = -1, rs2 = -1;
    for (size_t o = 0; o < s.ops.size(); ++o) {
      const plan::ScheduleOp& op = s.ops[o];
      if (op.kind == plan::OpKind::all_gather && op.unit == 1 && op.phase == plan::Phase::backward)
        ag1 = pos[o];
      if (op.kind == plan::OpKind::backward && op.unit == 2) {
        if (first_bwd2 < 0) first_bwd2 = pos[o];
        last_bwd2 = pos[o];
      }
      if (op.kind == plan::OpKind::reduce_scatter && op.unit == 2) rs2 = pos[o];
    }
    REQUIRE(ag1 >= 0);
    if (std::string(mode) == "pre") {
      CHECK(ag1 < first_bwd2);
    } else if (std::string(mode) == "post") {
      CHECK(ag1 > last_bwd2);
      CHECK(ag1 < rs2);  // prefetched in the post-backward hook, before the reduce-scatter
    } else {
      CHECK(ag1 > rs2);
    }
  }
}

TEST_CASE("fsdp1 limit_all_gathers blocks the host on the oldest free", "[schedule][fsdp1]") {
  auto host_waits = [](const plan::Schedule& s) {
    int n = 0;
    for (const plan::Action& a : s.actions) n += a.kind == plan::ActionKind::host_wait;
    return n;
  };
  json base = {{"flavor", "fsdp1"}, {"wrap", {{"type", "size"}, {"min_num_params", 1000}}}};
  Planned limited = make(plan::load_model("gpt2-tiny"), base, 4);
  json unlimited_doc = base;
  unlimited_doc["limit_all_gathers"] = false;
  Planned unlimited = make(plan::load_model("gpt2-tiny"), unlimited_doc, 4);
  CHECK(host_waits(limited.ranks[0]) > 0);
  CHECK(host_waits(unlimited.ranks[0]) == 0);
  // Every host wait targets a compute op (the event recorded after a free).
  for (const plan::Action& a : limited.ranks[0].actions)
    if (a.kind == plan::ActionKind::host_wait)
      CHECK(limited.ranks[0].streams[limited.ranks[0].ops[a.op].stream] == "compute");
}

TEST_CASE("fsdp2 keeps at most one reduce-scatter outstanding", "[schedule][fsdp2]") {
  Planned p = make(plan::load_model("gpt2-tiny"),
                   {{"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}}, 4);
  const plan::Schedule& s = p.ranks[0];
  int prev_rs = -1;
  int checked = 0;
  for (size_t o = 0; o < s.ops.size(); ++o) {
    const plan::ScheduleOp& op = s.ops[o];
    if (op.kind == plan::OpKind::grad_cast && prev_rs >= 0) {
      // The copy-in of the next unit's gradients waits for the previous reduce-scatter.
      CHECK(std::find(op.waits.begin(), op.waits.end(), prev_rs) != op.waits.end());
      ++checked;
    }
    if (op.kind == plan::OpKind::reduce_scatter) prev_rs = static_cast<int>(o);
  }
  CHECK(checked == 2);
}

TEST_CASE("gradient accumulation without sync: all-gathers every micro-step, one reduce-scatter",
          "[schedule][accumulation]") {
  Planned p =
      make(plan::load_model("gpt2-tiny"),
           {{"grad_accum_steps", 3}, {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}}, 4);
  const plan::Schedule& s = p.ranks[0];
  CHECK(count_ops(s, plan::OpKind::all_gather) == 3 * 5);
  CHECK(count_ops(s, plan::OpKind::reduce_scatter) == 3);
  // The unsharded accumulators are allocated once per unit, in reduce dtype.
  int accum = 0;
  for (const plan::Buffer& b : s.buffers) accum += b.role == plan::BufferRole::accum_grad;
  CHECK(accum == 3);
}

TEST_CASE("DDP (shard_group_size 1) all-reduces and never all-gathers", "[schedule][ddp]") {
  Planned p = make(plan::load_model("gpt2-tiny"), {{"shard_group_size", 1}}, 4);
  const plan::Schedule& s = p.ranks[0];
  CHECK(count_ops(s, plan::OpKind::all_gather) == 0);
  CHECK(count_ops(s, plan::OpKind::reduce_scatter) == 0);
  CHECK(count_ops(s, plan::OpKind::all_reduce) == 1);
  // 2(N-1)/N x 4 bytes x Psi with N = 4.
  const double psi = static_cast<double>(p.graph.params_total());
  CHECK(plan::schedule_comm_bytes(s).all_reduce == Approx(2.0 * 3.0 / 4.0 * 4.0 * psi));
}

TEST_CASE("gradient clipping adds a scalar all-reduce and a host synchronisation",
          "[schedule][clip]") {
  Planned p = make(plan::load_model("gpt2-tiny"), {{"grad_clip_norm", 1.0}}, 4);
  const plan::Schedule& s = p.ranks[0];
  int scalar = 0;
  for (const plan::ScheduleOp& op : s.ops)
    scalar += op.kind == plan::OpKind::all_reduce && op.bytes == 4;
  CHECK(scalar == 1);
  bool waited = false;
  for (const plan::Action& a : s.actions)
    if (a.kind == plan::ActionKind::host_wait && s.ops[a.op].kind == plan::OpKind::all_reduce)
      waited = true;
  CHECK(waited);
}

TEST_CASE("activation checkpointing recomputes the checkpointed blocks' ops",
          "[schedule][checkpointing]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  Planned full = make(g,
                      {{"activation_checkpointing", "full"},
                       {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}},
                      4);
  int block_ops = 0;
  for (size_t u = 1; u < full.units.units.size(); ++u)
    block_ops += full.units.units[u].last_op - full.units.units[u].first_op + 1;
  CHECK(count_ops(full.ranks[0], plan::OpKind::recompute) == block_ops);
  Planned every2 = make(g,
                        {{"activation_checkpointing", {{"every", 2}}},
                         {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}},
                        4);
  const plan::Unit& b0 = every2.units.units[1];
  CHECK(count_ops(every2.ranks[0], plan::OpKind::recompute) == b0.last_op - b0.first_op + 1);
  CHECK_THROWS_WITH(make(g, {{"activation_checkpointing", "full"}}, 4),
                    Catch::Contains("activation_checkpointing"));
}

TEST_CASE("every-k checkpointing with an offset: torchtitan's blocks k-1, 2k-1, ...",
          "[schedule][checkpointing]") {
  // gpt2-small: 12 GPT2Blocks, units 1..12 in model order (unit 0 the root).
  const plan::Graph g = plan::load_model("gpt2-small");
  const auto blocks = [&](const nlohmann::json& ac) {
    const plan::Policy p =
        plan::policy_from_json({{"activation_checkpointing", ac},
                                {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}});
    const plan::UnitPlan units = plan::build_units(g, p, plan::validate_policy(p, g, 2));
    const std::vector<bool> ckpt = plan::checkpointed_units(p, units);
    std::vector<int> out;
    for (size_t u = 1; u < ckpt.size(); ++u)
      if (ckpt[u]) out.push_back(static_cast<int>(u) - 1);  // block index
    return out;
  };
  CHECK(blocks({{"every", 4}}) == std::vector<int>{0, 4, 8});
  // torchtitan ac_freq = 4: its wrapper's call count (from 1) % 4 == 0.
  CHECK(blocks({{"every", 4}, {"offset", 3}}) == std::vector<int>{3, 7, 11});
  CHECK(blocks({{"every", 5}, {"offset", 2}}) == std::vector<int>{2, 7});
  CHECK(blocks({{"every", 1}, {"offset", 0}}).size() == 12);
  // The offset survives the policy JSON round trip, and is left out when 0.
  const plan::Policy p =
      plan::policy_from_json({{"activation_checkpointing", {{"every", 4}, {"offset", 3}}}});
  CHECK(plan::policy_to_json(p)["activation_checkpointing"] ==
        nlohmann::json({{"every", 4}, {"offset", 3}}));
  CHECK_FALSE(plan::policy_to_json(plan::policy_from_json(
      {{"activation_checkpointing", {{"every", 4}}}}))["activation_checkpointing"]
                  .contains("offset"));
  CHECK_THROWS_WITH(
      plan::policy_from_json({{"activation_checkpointing", {{"every", 4}, {"offset", 4}}}}),
      Catch::Contains("activation_checkpointing.offset: 4 must be below every (4)"));
  CHECK_THROWS_WITH(
      plan::policy_from_json({{"activation_checkpointing", {{"every", 4}, {"ofset", 1}}}}),
      Catch::Contains("activation_checkpointing.ofset: unknown key"));
}

TEST_CASE("cpu_offload keeps shards on the host and copies them over", "[schedule][offload]") {
  Planned p = make(plan::load_model("gpt2-tiny"), {{"cpu_offload", true}}, 4);
  const plan::Schedule& s = p.ranks[0];
  CHECK(s.persistent_device_bytes() == 0);
  CHECK(s.persistent_host_bytes() == 16 * p.units.total_shard_numel());
  CHECK(count_ops(s, plan::OpKind::h2d) == 1);  // one unit, gathered once (root)
  CHECK(count_ops(s, plan::OpKind::d2h) == 1);
  for (const plan::ScheduleOp& op : s.ops)
    if (op.kind == plan::OpKind::optimizer) CHECK(s.streams[op.stream] == "host");
}

TEST_CASE("toy model fsdp2: the forward issue order of unit 1 is copy-in, all-gather, copy-out",
          "[schedule][toy]") {
  Planned p = make(test::toy_graph(),
                   {{"wrap", {{"type", "class"}, {"classes", {"Block"}}}}, {"seq_len", 4}}, 2);
  const plan::Schedule& s = p.ranks[0];
  std::vector<std::string> seq;
  for (const plan::Action& a : s.actions) {
    if (a.kind != plan::ActionKind::launch) continue;
    const plan::ScheduleOp& op = s.ops[a.op];
    if (op.unit != 1 || op.phase != plan::Phase::forward) continue;
    seq.push_back(std::string(plan::op_kind_name(op.kind)) + "@" + s.streams[op.stream]);
  }
  CHECK(seq == std::vector<std::string>{"cast_params@ag_copy_in", "all_gather@all_gather",
                                        "copy_out@compute", "forward@compute"});
  // The all-gather buffers of unit 1: 2 ranks x 10 elements x 4 bytes.
  int found = 0;
  for (const plan::Buffer& b : s.buffers)
    if (plan::buffer_name(p.graph, b) == "m0.u1.ag_out") {
      ++found;
      CHECK(b.bytes == 80);
    }
  CHECK(found == 2);  // gathered for forward and again for backward
}

TEST_CASE("shared sizes and activation plans give the schedule built without them", "[schedule]") {
  // Sweeps pass one WorkloadSizes per workload and one ActivationPlan per
  // (units, checkpointed blocks); a plan for other units or other blocks, and
  // sizes of another workload, must be ignored, never used.
  const plan::Graph g = plan::load_model("gpt2-small");
  const plan::Policy p =
      plan::policy_from_json({{"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}},
                              {"activation_checkpointing", {{"every", 2}}},
                              {"seq_len", 128}});
  const plan::World w = plan::validate_policy(p, g, 4);
  const plan::UnitPlan units = plan::build_units(g, p, w);
  const plan::UnitPlan other_units = plan::build_units(g, p, w);  // equal, another object
  const nlohmann::json own = plan::schedule_to_json(g, units, plan::build_schedule(g, p, units, 1));

  const plan::WorkloadSizes sizes = plan::workload_sizes(g, {1, 128});
  const plan::WorkloadSizes wrong_sizes = plan::workload_sizes(g, {2, 64});
  plan::ActivationPlan acts(g);
  acts.set_checkpointed(units, plan::checkpointed_units(p, units));
  plan::ActivationPlan other_blocks(g);
  other_blocks.set_checkpointed(units, std::vector<bool>(units.units.size(), false));
  plan::ActivationPlan for_other_units(g);
  for_other_units.set_checkpointed(other_units, plan::checkpointed_units(p, other_units));

  CHECK(plan::schedule_to_json(g, units, plan::build_schedule(g, p, units, 1, &sizes, &acts)) ==
        own);
  CHECK(plan::schedule_to_json(
            g, units, plan::build_schedule(g, p, units, 1, &wrong_sizes, &other_blocks)) == own);
  CHECK(plan::schedule_to_json(
            g, units, plan::build_schedule(g, p, units, 1, nullptr, &for_other_units)) == own);
  // The checkpointed blocks: every other GPT2Block of the 12.
  const std::vector<bool> ck = plan::checkpointed_units(p, units);
  CHECK(std::count(ck.begin(), ck.end(), true) == 6);
}

TEST_CASE("check_schedule reports a buffer used on two streams without a wait between them",
          "[schedule][check]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  for (const char* flavor : {"fsdp1", "fsdp2"}) {
    INFO(flavor);
    Planned p =
        make(g,
             {{"flavor", flavor},
              {"reshard_after_forward", std::string(flavor) == "fsdp2" ? json(2) : json(true)},
              {"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}},
             4);
    plan::Schedule s = p.ranks[0];
    REQUIRE(plan::check_schedule(p.graph, p.units, s).empty());
    // Every reduce-scatter waits for the compute stream's work on its input;
    // dropping those waits (and the host waits on it) must be caught.
    int dropped = 0;
    for (plan::ScheduleOp& op : s.ops) {
      if (op.kind != plan::OpKind::reduce_scatter) continue;
      plan::SmallVector<int, 4> kept;
      for (int w : op.waits)
        if (s.ops[static_cast<size_t>(w)].stream == op.stream) kept.push_back(w);
      dropped += static_cast<int>(op.waits.size() - kept.size());
      op.waits = kept;
    }
    REQUIRE(dropped > 0);
    const std::vector<std::string> errors = plan::check_schedule(p.graph, p.units, s);
    REQUIRE_FALSE(errors.empty());
    bool named = false;
    for (const std::string& e : errors)
      named = named || (e.find("reduce_scatter") != std::string::npos &&
                        e.find("concurrently with") != std::string::npos);
    CHECK(named);
  }
}
