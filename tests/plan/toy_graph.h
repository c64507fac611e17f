// A hand-made 90-parameter model for unit and sharding tests, small enough to
// work every expected partition out by hand:
//
//   ""            Net          (root)
//   emb           Embedding    emb.weight [10, 4] = 40    (tied with head)
//   blocks        ModuleList   (container)
//   blocks.0      Block
//   blocks.0.fc   Linear       blocks.0.fc.weight [4, 4] = 16, blocks.0.fc.bias [4] = 4
//   blocks.1      Block
//   blocks.1.fc   Linear       blocks.1.fc.weight [4, 4] = 16, blocks.1.fc.bias [4] = 4
//   head          Linear       head.bias [10] = 10; its op also reads emb.weight
//
// Ops in forward order: emb, blocks.0.fc, blocks.1.fc, head, loss (cross_entropy in head).
#pragma once

#include "plan/graph.h"

namespace shardscope::test {

inline plan::Graph toy_graph() {
  using plan::Poly;
  plan::Graph g;
  g.model_name = "toy";
  g.family = "mlp";
  g.max_seq_len = 8;
  g.vocab_size = 10;
  auto module = [&](const std::string& name, const std::string& cls, int parent, bool container) {
    plan::Module m;
    m.name = name;
    m.class_name = cls;
    m.parent = parent;
    m.is_container = container;
    g.modules.push_back(m);
    int id = static_cast<int>(g.modules.size()) - 1;
    if (parent >= 0) g.modules[parent].children.push_back(id);
    return id;
  };
  int root = module("", "Net", -1, false);
  int emb = module("emb", "Embedding", root, false);
  int blocks = module("blocks", "ModuleList", root, true);
  int b0 = module("blocks.0", "Block", blocks, false);
  int fc0 = module("blocks.0.fc", "Linear", b0, false);
  int b1 = module("blocks.1", "Block", blocks, false);
  int fc1 = module("blocks.1.fc", "Linear", b1, false);
  int head = module("head", "Linear", root, false);
  auto param = [&](const std::string& name, std::vector<int64_t> shape, int m) {
    plan::Param p;
    p.name = name;
    p.shape = std::move(shape);
    p.module = m;
    g.params.push_back(p);
    return static_cast<int>(g.params.size()) - 1;
  };
  int w_emb = param("emb.weight", {10, 4}, emb);
  int w0 = param("blocks.0.fc.weight", {4, 4}, fc0);
  int bias0 = param("blocks.0.fc.bias", {4}, fc0);
  int w1 = param("blocks.1.fc.weight", {4, 4}, fc1);
  int bias1 = param("blocks.1.fc.bias", {4}, fc1);
  int bias_head = param("head.bias", {10}, head);
  auto tensor = [&](const std::string& name, std::vector<Poly> shape, plan::DType dt) {
    plan::Tensor t;
    t.name = name;
    t.shape = std::move(shape);
    t.dtype = dt;
    g.tensors.push_back(t);
    return static_cast<int>(g.tensors.size()) - 1;
  };
  const Poly B = Poly::term(1, 1, 0), T = Poly::term(1, 0, 1);
  int ids = tensor("ids", {B, T}, plan::DType::i64);
  int labels = tensor("labels", {B, T}, plan::DType::i64);
  int x0 = tensor("x0", {B, T, Poly::constant(4)}, plan::DType::f32);
  int x1 = tensor("x1", {B, T, Poly::constant(4)}, plan::DType::f32);
  int x2 = tensor("x2", {B, T, Poly::constant(4)}, plan::DType::f32);
  int logits = tensor("logits", {B, T, Poly::constant(10)}, plan::DType::f32);
  int loss = tensor("loss", {}, plan::DType::f32);
  g.inputs = {ids, labels};
  g.loss = loss;
  auto op = [&](const std::string& name, const std::string& type, int m, std::vector<int> in,
                std::vector<int> out, std::vector<int> params, std::vector<int> saved) {
    plan::Op o;
    o.name = name;
    o.type = plan::parse_op_type(type, "toy op type");
    o.module = m;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.params = std::move(params);
    o.saved = std::move(saved);
    o.fwd_flops = Poly::term(32, 1, 1);
    o.bwd_flops = Poly::term(64, 1, 1);
    g.ops.push_back(o);
  };
  op("emb", "embedding", emb, {ids}, {x0}, {w_emb}, {ids});
  op("blocks.0.fc", "linear", fc0, {x0}, {x1}, {w0, bias0}, {x0});
  op("blocks.1.fc", "linear", fc1, {x1}, {x2}, {w1, bias1}, {x1});
  op("head", "linear", head, {x2}, {logits}, {w_emb, bias_head}, {x2});
  op("head.loss", "cross_entropy", head, {logits, labels}, {loss}, {}, {logits, labels});
  return g;
}

}  // namespace shardscope::test
