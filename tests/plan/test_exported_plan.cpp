// Planning exported graphs (docs/models.md, "Exported graphs"): units from
// default_wrap_classes, ops in non-leaf modules, requires_grad, module
// buffers, and op-level checkpointing by aten name, on the hand-made fixture
// tests/data/exported/tiny-mlp.graph.json (see test_graph_io_aten.cpp):
//   ops 0 layers.0.fc.addmm (module layers.0.fc)   1 layers.0.relu (layers.0)
//       2 layers.1.fc.mm    (layers.1.fc)          3 layers.1.relu (layers.1)
//       4 head.mm (head)  5 log_softmax (root)  6 nll_loss (root)
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/activations.h"
#include "plan/error.h"
#include "plan/models.h"
#include "plan/op_checkpointing.h"
#include "plan/policy.h"
#include "plan/schedule.h"
#include "plan/units.h"

using nlohmann::json;
using namespace shardscope::plan;

namespace {

Graph tiny_mlp() {
  return load_model(std::string(SHARDSCOPE_SOURCE_DIR) +
                    "/tests/data/exported/tiny-mlp.graph.json");
}

std::vector<std::string> unit_names(const UnitPlan& up) {
  std::vector<std::string> names;
  for (const Unit& u : up.units) names.push_back(u.name);
  return names;
}

UnitPlan units_of(const Graph& g, const json& policy_doc, int64_t world = 2) {
  const Policy p = policy_from_json(policy_doc);
  return build_units(g, p, validate_policy(p, g, world));
}

std::string units_error(const Graph& g, const json& policy_doc) {
  try {
    units_of(g, policy_doc);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// Buffers of `s` with role `role` naming tensor `t`.
int count_buffers(const Schedule& s, BufferRole role, int t) {
  int n = 0;
  for (const Buffer& b : s.buffers) n += b.role == role && b.tensor == t;
  return n;
}

Schedule schedule_of(const Graph& g, const json& policy_doc, int64_t world = 2) {
  const Policy p = policy_from_json(policy_doc);
  const UnitPlan up = build_units(g, p, validate_policy(p, g, world));
  Schedule s = build_schedule(g, p, up, 0);
  for (const std::string& what : check_schedule(g, up, s)) FAIL_CHECK(what);
  return s;
}

std::vector<bool> cached_of(const Graph& g, const json& ac) {
  Policy p = policy_from_json({{"activation_checkpointing", ac}});
  const UnitPlan up = build_units(g, p, validate_policy(p, g, 2));
  return cached_ops(p, g, up, checkpointed_units(p, up));
}

}  // namespace

TEST_CASE("exported graph: units wrap default_wrap_classes unless the policy names a wrap",
          "[plan][exported]") {
  const Graph g = tiny_mlp();
  // Policy says nothing (wrap type none): the graph's MLPLayer.
  CHECK(unit_names(units_of(g, json::object())) ==
        std::vector<std::string>{"<root>", "layers.0", "layers.1"});
  // An explicit class list replaces it.
  CHECK(unit_names(units_of(g, {{"wrap", {{"type", "class"}, {"classes", {"Linear"}}}}})) ==
        std::vector<std::string>{"<root>", "layers.0.fc", "layers.1.fc", "head"});
  // The root alone: wrap.modules [""].
  CHECK(unit_names(units_of(g, {{"wrap", {{"type", "modules"}, {"modules", {""}}}}})) ==
        std::vector<std::string>{"<root>"});
  // A relu sits in its MLPLayer (not a leaf): it belongs to that layer's unit.
  const UnitPlan up = units_of(g, json::object());
  CHECK(up.op_unit == std::vector<int>{1, 1, 2, 2, 0, 0, 0});
  CHECK(up.units[1].first_op == 0);
  CHECK(up.units[1].last_op == 1);
  // 544 = 32 x 16 + 32 (layers.0.fc), 1024 = 32 x 32, 320 = 10 x 32 (head, on the root).
  CHECK(up.units[0].numel == 320);
  CHECK(up.units[1].numel == 544);
  CHECK(up.units[2].numel == 1024);
}

TEST_CASE("exported graph without default_wrap_classes: planning names wrap.classes",
          "[plan][exported]") {
  Graph g = tiny_mlp();
  g.default_wrap_classes.clear();
  CHECK(units_error(g, json::object()) ==
        "policy: wrap.classes: exported graph tiny-mlp has no default_wrap_classes and the "
        "policy names no wrap classes: set wrap.type=class and wrap.classes (its classes: "
        "Linear, MLPLayer, ModuleList, TinyMLP)");
  // A wrap the policy states still plans.
  CHECK(unit_names(units_of(g, {{"wrap", {{"type", "size"}, {"min_num_params", 1000}}}})) ==
        std::vector<std::string>{"<root>", "layers.1.fc"});
  // Default classes that match no module are the graph's error.
  g.default_wrap_classes = {"DecoderLayer"};
  CHECK_THAT(units_error(g, json::object()),
             Catch::StartsWith("graph: default_wrap_classes: no module of tiny-mlp has any of "
                               "these classes"));
  // A native graph keeps wrap none = the root alone.
  CHECK(unit_names(units_of(load_model("mlp"), json::object())) ==
        std::vector<std::string>{"<root>"});
}

TEST_CASE("exported graph: a per-unit mixed_precision override is refused", "[plan][exported]") {
  // Traced in one compute dtype, the graph has no casts between units of
  // different dtypes: an fp32 root over bf16 blocks would be mispriced
  // (the llama-h128 ovRootF32 reference: 13% low), so it is an error.
  const json bf16 = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  const json root_fp32 = {
      {"mixed_precision", bf16},
      {"overrides", {{{"units", {"<root>"}}, {"mixed_precision", {{"param_dtype", "fp32"}}}}}}};
  CHECK_THAT(units_error(tiny_mlp(), root_fp32),
             Catch::StartsWith("policy: overrides: a per-unit mixed_precision on exported graph "
                               "tiny-mlp is not modelled"));
  // An override that keeps the policy's dtypes, or changes only resharding, plans.
  const json same = {{"mixed_precision", bf16},
                     {"overrides", {{{"units", {"<root>"}}, {"mixed_precision", bf16}}}}};
  CHECK(unit_names(units_of(tiny_mlp(), same)).size() == 3);
  // A native graph takes the same override (wrap none: the root alone).
  CHECK(unit_names(units_of(load_model("llama-tiny"), root_fp32)) ==
        std::vector<std::string>{"<root>"});
}

TEST_CASE("a requires_grad false tensor gets no gradient buffer", "[plan][exported]") {
  Graph g = tiny_mlp();
  const int relu0 = 3;  // layers.0.relu, read by layers.1.fc.mm
  REQUIRE(g.tensors[relu0].name == "layers.0.relu");
  {
    const ActivationPlan acts(g);
    CHECK(acts.needs_grad(relu0));
    CHECK_FALSE(acts.needs_grad(9));  // total_weight: requires_grad false in the file
    const Schedule s = schedule_of(g, json::object());
    CHECK(count_buffers(s, BufferRole::activation_grad, relu0) == 1);
    CHECK(count_buffers(s, BufferRole::activation_grad, 9) == 0);
    CHECK(count_buffers(s, BufferRole::activation, 9) == 1);
  }
  g.tensors[relu0].requires_grad = false;
  const ActivationPlan acts(g);
  CHECK_FALSE(acts.needs_grad(relu0));
  const Schedule s = schedule_of(g, json::object());
  CHECK(count_buffers(s, BufferRole::activation_grad, relu0) == 0);
  CHECK(count_buffers(s, BufferRole::activation, relu0) == 1);
}

TEST_CASE("a module buffer is resident, unsharded and never freed in the step",
          "[plan][exported]") {
  Graph g = tiny_mlp();
  // scale [32], fp32 compute-precision, read by layers.1.relu; a bool mask
  // [B, 32] read by the same op.
  g.tensors.push_back(Tensor{"layers.1.scale", {Poly::constant(32)}});
  g.tensors.back().requires_grad = false;
  g.tensors.push_back(Tensor{"mask", {Poly::term(1, 1, 0), Poly::constant(32)}, DType::boolean});
  g.buffers = {10, 11};
  g.ops[3].inputs = {4, 10, 11};
  g.validate();
  for (const char* dtype : {"fp32", "bf16"}) {
    INFO(dtype);
    for (const bool offload : {false, true}) {
      INFO("cpu_offload " << offload);
      const json policy = {{"mixed_precision", {{"param_dtype", dtype}}},
                           {"cpu_offload", offload},
                           {"batch_size", 4},
                           {"grad_accum_steps", 2}};
      const Schedule s = schedule_of(g, policy);
      for (const int t : {10, 11}) {
        int found = 0;
        for (size_t b = 0; b < s.buffers.size(); ++b) {
          const Buffer& buf = s.buffers[b];
          if (buf.tensor != t) continue;
          ++found;
          CHECK(buf.role == BufferRole::module_buffer);
          CHECK(buf.persistent);
          CHECK_FALSE(buf.on_host);  // CPUOffload moves parameters only
          CHECK(buf.category == BufferCategory::parameters);
          // 32 elements x 4 (fp32) or 2 (bf16) bytes; the mask B x 32 x 1 byte.
          CHECK(buf.bytes == (t == 10 ? 32 * (std::string(dtype) == "fp32" ? 4 : 2) : 4 * 32));
          for (const Action& a : s.actions)
            CHECK_FALSE((a.kind == ActionKind::free && a.buffer == static_cast<int>(b)));
        }
        CHECK(found == 1);  // one buffer for both micro-steps
      }
      CHECK(count_buffers(s, BufferRole::activation_grad, 10) == 0);
    }
  }
}

TEST_CASE("op-level checkpointing names aten ops by overload, packet or kernel",
          "[plan][exported][op_checkpointing]") {
  const Graph g = tiny_mlp();
  // Blocks layers.0 (ops 0, 1) and layers.1 (ops 2, 3) are checkpointed.
  using V = std::vector<bool>;
  CHECK(cached_of(g, {{"save_ops", {"aten.relu.default"}}}) ==
        V{false, true, false, true, false, false, false});
  CHECK(cached_of(g, {{"save_ops", {"aten.relu"}}}) ==
        V{false, true, false, true, false, false, false});
  CHECK(cached_of(g, {{"save_ops", {"mm"}}}) == V{false, false, true, false, false, false, false});
  CHECK(cached_of(g, {{"save_ops", {"addmm"}}}) ==
        V{true, false, false, false, false, false, false});
  CHECK(cached_of(g, {{"save_ops", {"linear"}}}) ==
        V{true, false, true, false, false, false, false});
  // torchtitan: aten.mm saved unless it is a block's 2nd, 4th, ... mm; the
  // one mm of layers.1 is its 1st: saved. addmm is not in the list.
  CHECK(cached_of(g, {{"preset", "torchtitan"}}) ==
        V{false, false, true, false, false, false, false});
  // Only a checkpointed block's ops: head.mm is on the root.
  CHECK_THROWS_WITH(cached_of(g, {{"save_ops", {"aten._log_softmax.default"}}}),
                    "policy: activation_checkpointing.save_ops[0]: 'aten._log_softmax.default' "
                    "matches no op of the checkpointed blocks of tiny-mlp");
  CHECK_THROWS_WITH(cached_of(g, {{"save_ops", {"aten.bmm"}}}),
                    Catch::Contains("'aten.bmm' matches no op"));
  CHECK_THROWS_WITH(cached_of(g, {{"save_ops", {"relu6"}}}),
                    Catch::Contains("unknown op 'relu6'") &&
                        Catch::Contains("or an aten operator of an exported graph"));
  // An attention-kind op is named by "attention".
  Graph attn = g;
  attn.ops[1].attrs.aten = "aten._scaled_dot_product_flash_attention.default";
  attn.ops[1].attrs.kind = "attention";
  CHECK(cached_of(attn, {{"save_ops", {"attention"}}}) ==
        V{false, true, false, false, false, false, false});
}

namespace {

// tiny-mlp with a skip connection: cat(layers.1.relu, layers.0.relu) [B, 64]
// feeds the head, so layers.0.relu (tensor 3) is read by layers.1.fc.mm (op 2)
// and by the cat (op 4); layers.1.relu (tensor 5) by the cat alone.
Graph tiny_mlp_with_cat() {
  Graph g = tiny_mlp();
  Tensor cat_out;
  cat_out.name = "cat";
  cat_out.shape = {Poly::term(1, 1, 0), Poly::constant(64)};
  g.tensors.push_back(cat_out);
  const int cat_tensor = static_cast<int>(g.tensors.size()) - 1;
  Op cat;
  cat.name = "cat";
  cat.type = OpType::aten;
  cat.module = 0;
  cat.inputs = {5, 3};
  cat.outputs = {cat_tensor};
  cat.attrs.aten = "aten.cat.default";
  cat.attrs.kind = "memory";
  g.ops.insert(g.ops.begin() + 4, cat);
  g.ops[5].inputs = {cat_tensor};  // head.mm, which saves its input
  g.ops[5].saved = {cat_tensor};
  g.validate();
  return g;
}

// Position in s.actions of the launch of graph op `graph_op`'s backward.
size_t backward_launch(const Schedule& s, int graph_op) {
  for (size_t i = 0; i < s.actions.size(); ++i) {
    const Action& a = s.actions[i];
    if (a.kind == ActionKind::launch && s.ops[a.op].kind == OpKind::backward &&
        s.ops[a.op].graph_op == graph_op)
      return i;
  }
  FAIL("no backward launch of graph op " << graph_op);
  return 0;
}

// Position in s.actions of the free of the activation gradient of tensor `t`.
size_t grad_free(const Schedule& s, int t) {
  for (size_t i = 0; i < s.actions.size(); ++i) {
    const Action& a = s.actions[i];
    if (a.kind == ActionKind::free && s.buffers[a.buffer].role == BufferRole::activation_grad &&
        s.buffers[a.buffer].tensor == t)
      return i;
  }
  FAIL("no free of tensor " << t << "'s gradient");
  return 0;
}

}  // namespace

TEST_CASE("exported graph: cat's input gradients are views that keep its output gradient alive",
          "[plan][exported]") {
  const Graph g = tiny_mlp_with_cat();
  const int cat_tensor = static_cast<int>(g.tensors.size()) - 1;
  const Schedule s = schedule_of(g, json::object());
  // The cat's inputs get no gradient buffers of their own: layers.1.relu's is
  // a view of the cat's [B, 64] gradient; layers.0.relu's one buffer is the
  // out-of-place sum autograd makes at layers.1.fc.mm's backward (a view is
  // not dense, so InputBuffer does not add into it in place).
  CHECK(count_buffers(s, BufferRole::activation_grad, 5) == 0);
  CHECK(count_buffers(s, BufferRole::activation_grad, 3) == 1);
  CHECK(count_buffers(s, BufferRole::activation_grad, cat_tensor) == 1);
  // The whole cat gradient lives until the skip's view is summed, after
  // layers.1.fc.mm's backward (op 2), not only through the cat's backward (op 4).
  CHECK(grad_free(s, cat_tensor) > backward_launch(s, 2));
  // layers.0.relu's sum exists from the mm's backward on, past the view.
  CHECK(grad_free(s, 3) > grad_free(s, cat_tensor));
}
