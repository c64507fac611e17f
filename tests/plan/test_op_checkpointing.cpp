// Per-op selective activation checkpointing (plan/op_checkpointing.h): the
// policy forms and their errors, which ops torchtitan's preset saves in each
// family, and by hand on llama-tiny (C 64, F 176, H 4, Hkv 2, D 16; B 2,
// T 16: N = 32 tokens, fp32) the tensors kept per block, the recompute FLOPs
// per block and the activation bytes live when backward starts.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "plan/activations.h"
#include "plan/error.h"
#include "plan/models.h"
#include "plan/op_checkpointing.h"
#include "plan/schedule.h"
#include "plan/schedule_costs.h"
#include "plan/units.h"
#include "plan/workload_sizes.h"
#include "tests/plan/planned.h"

using namespace shardscope;
using nlohmann::json;

namespace {

plan::Policy read(const json& ac) {
  return plan::policy_from_json({{"activation_checkpointing", ac}});
}

// The shared fixture (no schedule) with the units checkpointing wraps and the ops it caches.
struct Planned : test::Planned {
  std::vector<bool> checkpointed, cached;
};

Planned plan_for(const plan::Graph& g, const std::string& block, const json& ac) {
  Planned p{test::plan_units(g,
                             {{"wrap", {{"type", "class"}, {"classes", {block}}}},
                              {"activation_checkpointing", ac},
                              {"batch_size", 2},
                              {"seq_len", 16}},
                             2),
            {},
            {}};
  p.checkpointed = plan::checkpointed_units(p.policy, p.units);
  p.cached = plan::cached_ops(p.policy, p.graph, p.units, p.checkpointed);
  return p;
}

// Names of the cached ops of layer 0 ("<prefix>0." stripped).
std::vector<std::string> cached_in_layer0(const Planned& p, const std::string& prefix) {
  std::vector<std::string> out;
  for (size_t o = 0; o < p.graph.ops.size(); ++o)
    if (p.cached[o] && p.graph.ops[o].name.rfind(prefix + "0.", 0) == 0)
      out.push_back(p.graph.ops[o].name.substr(prefix.size() + 2));
  return out;
}

// Activation bytes (forward-produced tensors and inputs) live when the
// first backward op launches.
int64_t live_at_backward(const plan::Schedule& s) {
  int64_t live = 0;
  for (const plan::Action& a : s.actions) {
    if (a.kind == plan::ActionKind::launch && s.ops[a.op].kind == plan::OpKind::backward) break;
    if (a.kind != plan::ActionKind::alloc && a.kind != plan::ActionKind::free) continue;
    const plan::Buffer& b = s.buffers[a.buffer];
    if (b.role != plan::BufferRole::activation && b.role != plan::BufferRole::input) continue;
    live += a.kind == plan::ActionKind::alloc ? b.bytes : -b.bytes;
  }
  return live;
}

}  // namespace

TEST_CASE("op checkpointing: the policy forms round-trip", "[plan][policy][sac]") {
  const plan::Policy t = read({{"preset", "torchtitan"}});
  CHECK(t.activation_checkpointing == plan::CheckpointMode::ops);
  CHECK(t.op_checkpointing.save_ops == std::vector<std::string>{"mm", "attention"});
  CHECK(t.op_checkpointing.save_every_other_matmul);
  CHECK(t.checkpoint_every == 1);
  CHECK(plan::policy_to_json(t)["activation_checkpointing"] == json{{"preset", "torchtitan"}});

  const json custom = {{"save_ops", {"linear", "attention"}},
                       {"save_every_other_matmul", false},
                       {"every", 3},
                       {"offset", 2}};
  const plan::Policy c = read(custom);
  CHECK(c.checkpoint_every == 3);
  CHECK(c.checkpoint_offset == 2);
  CHECK(plan::policy_to_json(c)["activation_checkpointing"] == custom);
  // Reading the written form gives the same policy back.
  CHECK(plan::policy_to_json(plan::policy_from_json(plan::policy_to_json(c))) ==
        plan::policy_to_json(c));
  CHECK(plan::policy_to_json(read(
            {{"preset", "torchtitan"}, {"every", 2}, {"offset", 1}}))["activation_checkpointing"] ==
        json{{"preset", "torchtitan"}, {"every", 2}, {"offset", 1}});
}

TEST_CASE("op checkpointing: bad forms are errors naming the key", "[plan][policy][sac]") {
  const std::string k = "policy: activation_checkpointing";
  CHECK_THROWS_WITH(read({{"preset", "megatron"}}),
                    Catch::Contains(k + ".preset: unknown preset 'megatron' (known: torchtitan)"));
  CHECK_THROWS_WITH(read({{"preset", "torchtitan"}, {"save_ops", {"mm"}}}),
                    Catch::Contains(k + ": preset and save_ops exclude each other"));
  CHECK_THROWS_WITH(read({{"preset", "torchtitan"}, {"save_every_other_matmul", true}}),
                    Catch::Contains(k + ".save_every_other_matmul: not a key of the preset"));
  CHECK_THROWS_WITH(read({{"save_ops", {"linear", "softmax"}}}),
                    Catch::Contains(k + ".save_ops[1]: unknown op 'softmax'"));
  CHECK_THROWS_WITH(read({{"save_ops", json::array()}}),
                    Catch::Contains(k + ".save_ops: is empty"));
  CHECK_THROWS_WITH(read({{"save_ops", {"mm", "mm"}}}),
                    Catch::Contains(k + ".save_ops[1]: 'mm' is listed twice"));
  CHECK_THROWS_WITH(read({{"save_ops", {"linear", "mm"}}}),
                    Catch::Contains(k + ".save_ops: \"linear\" already covers"));
  CHECK_THROWS_WITH(read({{"save_ops", {"attention"}}, {"save_every_other_matmul", true}}),
                    Catch::Contains(k + ".save_every_other_matmul: needs \"mm\" or \"linear\""));
  CHECK_THROWS_WITH(read({{"save_ops", {"mm"}}, {"save_every_other_matmul", 1}}),
                    Catch::Contains(k + ".save_every_other_matmul: expected true or false"));
  CHECK_THROWS_WITH(read({{"save_ops", {"mm"}}, {"every", 2}, {"offset", 2}}),
                    Catch::Contains(k + ".offset: 2 must be below every (2)"));
  CHECK_THROWS_WITH(read({{"save_ops", {"mm"}}, {"evry", 2}}),
                    Catch::Contains(k + ".evry: unknown key"));
  CHECK_THROWS_WITH(read("selective"), Catch::Contains(k + ": unknown value 'selective'"));
  // An explicit op the checkpointed blocks do not have: GPT-2 has no RMSNorm.
  CHECK_THROWS_WITH(plan_for(plan::load_model("gpt2-tiny"), "GPT2Block",
                             {{"save_ops", {"attention", "rmsnorm"}}}),
                    Catch::Contains(k + ".save_ops[1]: 'rmsnorm' matches no op"));
}

TEST_CASE("op checkpointing: torchtitan's preset saves every other mm and attention",
          "[plan][sac]") {
  // Llama: q, k, v, o, gate, up, down are mm 1..7: the odd ones are saved.
  const Planned llama =
      plan_for(plan::load_model("llama-tiny"), "LlamaDecoderLayer", {{"preset", "torchtitan"}});
  CHECK(cached_in_layer0(llama, "model.layers.") ==
        std::vector<std::string>{"self_attn.q_proj", "self_attn.v_proj", "self_attn.attention",
                                 "mlp.gate_proj", "mlp.down_proj"});
  // Qwen2: q/k/v carry a bias (aten.addmm: not saved, not counted); o, gate,
  // up, down are mm 1..4.
  const Planned qwen2 =
      plan_for(plan::load_model(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/qwen2-tiny.json"),
               "Qwen2DecoderLayer", {{"preset", "torchtitan"}});
  CHECK(cached_in_layer0(qwen2, "model.layers.") ==
        std::vector<std::string>{"self_attn.attention", "self_attn.o_proj", "mlp.up_proj"});
  // GPT-2: every Conv1D is torch.addmm: only attention.
  const Planned gpt2 =
      plan_for(plan::load_model("gpt2-tiny"), "GPT2Block", {{"preset", "torchtitan"}});
  CHECK(cached_in_layer0(gpt2, "transformer.h.") == std::vector<std::string>{"attn.attention"});
  // The count restarts at every block: layer 1 saves the same ops.
  int layer1 = 0;
  for (size_t o = 0; o < llama.graph.ops.size(); ++o)
    if (llama.cached[o] && llama.graph.ops[o].name.rfind("model.layers.1.", 0) == 0) ++layer1;
  CHECK(layer1 == 5);
  // Ops outside checkpointed blocks are never cached: lm_head is an mm.
  CHECK_FALSE(llama.cached[static_cast<size_t>(llama.graph.ops.size() - 2)]);
  // every 2, offset 1: only layer 1 is a checkpointed block.
  const Planned odd = plan_for(plan::load_model("llama-tiny"), "LlamaDecoderLayer",
                               {{"preset", "torchtitan"}, {"every", 2}, {"offset", 1}});
  CHECK(cached_in_layer0(odd, "model.layers.").empty());
  CHECK(std::count(odd.cached.begin(), odd.cached.end(), true) == 5);
  // A custom list: "linear" saves biased and unbiased linears alike.
  const Planned lin =
      plan_for(plan::load_model("gpt2-tiny"), "GPT2Block", {{"save_ops", {"linear"}}});
  CHECK(cached_in_layer0(lin, "transformer.h.") ==
        std::vector<std::string>{"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"});
}

TEST_CASE("op checkpointing on llama-tiny: kept tensors, recompute FLOPs, live bytes by hand",
          "[plan][sac]") {
  const plan::Graph g = plan::load_model("llama-tiny");
  auto schedule = [&](const json& ac) {
    const Planned p = plan_for(g, "LlamaDecoderLayer", ac);
    return plan::build_schedule(p.graph, p.policy, p.units, 0);
  };
  const plan::Schedule none = schedule("none"), full = schedule("full"),
                       titan = schedule({{"preset", "torchtitan"}});
  const plan::WorkloadSizes sizes = plan::workload_sizes(g, titan.workload);

  // Tensors of layer 0 alive when backward starts (activation buffers only):
  // its output (residual_2, layer 1's checkpointed input; layer 0's input is
  // the embedding's output) and the cached outputs q [32, 64], v [32, 32],
  // attention out [32, 64] and its fp32 log-sum-exp [2, 4, 16],
  // gate [32, 176], down [32, 64].
  std::set<std::string> kept;
  std::vector<int> live(titan.buffers.size(), 0);
  for (const plan::Action& a : titan.actions) {
    if (a.kind == plan::ActionKind::launch && titan.ops[a.op].kind == plan::OpKind::backward) break;
    if (a.kind == plan::ActionKind::alloc) live[a.buffer] = 1;
    if (a.kind == plan::ActionKind::free) live[a.buffer] = 0;
  }
  for (size_t b = 0; b < live.size(); ++b) {
    const plan::Buffer& buf = titan.buffers[b];
    if (!live[b] || buf.role != plan::BufferRole::activation) continue;
    const std::string& n = g.tensors[buf.tensor].name;
    if (n.rfind("model.layers.0.", 0) == 0) kept.insert(n.substr(15));
  }
  CHECK(kept == std::set<std::string>{"self_attn.q_proj.out", "self_attn.v_proj.out",
                                      "self_attn.attention.out", "self_attn.attention.lse",
                                      "mlp.gate_proj.out", "mlp.down_proj.out", "residual_2.out"});

  // Recompute FLOPs of layer 0 (unit of model.layers.0): the non-cached ops.
  //   input_layernorm 4*N*C = 8192, k_proj 2*N*C*32 = 131072,
  //   o_proj 2*N*64*64 = 262144, residual_1 N*C = 2048,
  //   post_attention_layernorm 8192, up_proj 2*N*64*176 = 720896,
  //   swiglu 5*N*F = 28160, residual_2 2048: 1162752.
  // Full adds q_proj 262144, v_proj 131072, attention 4*B*T^2*H*D + RoPE
  // 3*B*T*(H+Hkv)*D = 131072 + 9216, gate_proj 720896, down_proj 720896: 3138048.
  auto recompute_flops = [&](const plan::Schedule& s) {
    double f = 0;
    for (const plan::ScheduleOp& op : s.ops)
      if (op.kind == plan::OpKind::recompute &&
          g.ops[op.graph_op].name.rfind("model.layers.0.", 0) == 0)
        f += plan::schedule_op_flops(sizes, op);
    return f;
  };
  CHECK(recompute_flops(titan) == 1162752.0);
  CHECK(recompute_flops(full) == 3138048.0);
  CHECK(recompute_flops(none) == 0.0);

  // Activation bytes live when backward starts, per block (fp32, 4 B):
  // the preset keeps 12928 elements more than full (the list above:
  // 2048 + 1024 + 2048 + 128 + 5632 + 2048), no checkpointing 26176 more than
  // the preset (everything autograd saves: both RMSNorms' rstd 32 and
  // normalised value 2048, their outputs 2048, k 1024, residual_1 2048, up,
  // act(gate) and swiglu out 5632 each, besides the preset's tensors other
  // than down's output 2048).
  CHECK(live_at_backward(titan) - live_at_backward(full) == 2 * 12928 * 4);
  CHECK(live_at_backward(none) - live_at_backward(titan) == 2 * 26176 * 4);
}
