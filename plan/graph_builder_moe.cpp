// GraphBuilder ops of the mixture-of-experts families (Mixtral, Qwen2-MoE):
// the router, the per-expert dispatch (a gather of the expert's tokens), the
// weighted combine (a scatter-add back to the tokens) and Qwen2-MoE's
// sigmoid-gated shared expert. Costs as documented in plan/graph_builder.h.
//
// What autograd saves, as transformers 4.57's MixtralSparseMoeBlock /
// Qwen2MoeSparseMoeBlock write it:
//  - F.softmax(router_logits, dtype=torch.float) saves its fp32 output
//    [N, E]; torch.topk saves its indices [N, k]; with norm_topk_prob the
//    in-place division keeps the fp32 top-k values [N, k] and their sum
//    [N, 1]; .to(dtype) gives the weights [N, k] the experts use;
//  - per expert, hidden_states[None, top_x] saves top_x (the slots here) and
//    gives the expert's input rows, which its w1/w3 linears save;
//    `expert(x) * routing_weights[top_x, idx, None]` saves the expert's output
//    rows and the gathered weights (the weights tensor here, the same N*k
//    elements over all experts); the product is added into the result by
//    index_add_ and not kept (not modelled: fused into the combine);
//  - an expert no token reaches is skipped by transformers; here its
//    tensors are empty (0 rows: the allocator's minimum block each).
#include "plan/error.h"
#include "plan/graph_builder.h"

namespace shardscope::plan {

GraphBuilder::MoeRoute GraphBuilder::moe_router(int module, int logits, int64_t experts,
                                                int64_t top_k, bool norm_topk_prob) {
  const Shape in = shape(logits);  // a copy: add_tensor below may reallocate the tensors
  if (in.size() != 3 || in[2] != dim(experts) || top_k < 1 || top_k > experts)
    throw Error("moe_router '" + op_name(module, "router") +
                "': expects logits [B, T, num_experts] and 1 <= top_k <= num_experts");
  Op op;
  op.name = op_name(module, "router");
  op.type = OpType::moe_router;
  op.module = module;
  op.inputs = {logits};
  const Poly b = in[0], t = in[1];
  op.outputs = {add_tensor(op.name + ".weights", {b, t, dim(top_k)}),
                add_tensor(op.name + ".indices", {b, t, dim(top_k)}, DType::i64),
                add_tensor(op.name + ".probs", {b, t, dim(experts)}, DType::f32, Precision::fp32)};
  if (norm_topk_prob) {
    op.outputs.push_back(
        add_tensor(op.name + ".topk", {b, t, dim(top_k)}, DType::f32, Precision::fp32));
    op.outputs.push_back(add_tensor(op.name + ".sum", {b, t, dim(1)}, DType::f32, Precision::fp32));
  }
  op.saved = {op.outputs[1], op.outputs[2]};
  if (norm_topk_prob) op.saved.insert(op.saved.end(), {op.outputs[3], op.outputs[4]});
  const Poly n = b * t;
  // softmax(dtype=float) upcasts compute-dtype logits first; its backward
  // scatters the top-k gradient into an fp32 [N, E] tensor.
  op.fwd_temps = {Temp{n * experts, Precision::fp32_if_lowp}};
  op.bwd_temps = {Temp{n * experts, Precision::fp32}};
  op.fwd_flops = n * (5 * experts) + (norm_topk_prob ? n * (2 * top_k) : Poly());
  op.bwd_flops = n * (4 * experts) + (norm_topk_prob ? n * (4 * top_k) : Poly());
  op.attrs.num_experts = experts;
  op.attrs.top_k = top_k;
  if (norm_topk_prob) op.attrs.norm_topk_prob = true;
  Op& added = add_op(std::move(op));
  return MoeRoute{added.outputs[0], added.outputs[1]};
}

GraphBuilder::MoeRows GraphBuilder::moe_dispatch(int module, int x, int indices, int64_t expert,
                                                 int64_t experts, int64_t top_k) {
  // Copies, not references: add_tensor below may reallocate the graph's tensors.
  const Shape in = shape(x);
  if (in.size() != 3 || in[0] != dim_b() || in[1] != dim_t())
    throw Error("moe_dispatch '" + op_name(module, "dispatch") + "': expects x [B, T, C]");
  const Poly c = in[2];
  const Poly r = Poly::routed(1, 1, 0, expert, experts, top_k);  // B*routed(e,E,k)
  Op op;
  op.name = op_name(module, "dispatch");
  op.type = OpType::moe_dispatch;
  op.module = module;
  op.inputs = {x, indices};
  op.outputs = {add_tensor(op.name + ".out", {r, c}),
                add_tensor(op.name + ".slots", {r}, DType::i64)};
  op.saved = {op.outputs[1]};
  op.bwd_flops = r * c;
  op.attrs.num_experts = experts;
  op.attrs.top_k = top_k;
  op.attrs.expert = expert;
  Op& added = add_op(std::move(op));
  // A gather touches the expert's rows only, not all of x (fp32 bytes, i64
  // slots and indices at 8): forward reads the [N, k] indices and the rows
  // and writes the rows and slots; backward reads the rows' gradient and the
  // slots and adds into dx (read and write).
  const Poly n = in[0] * in[1];
  added.fwd_bytes = r * c * 8 + r * 8 + n * (8 * top_k);
  added.bwd_bytes = r * c * 12 + r * 8;
  return MoeRows{added.outputs[0], added.outputs[1]};
}

int GraphBuilder::moe_combine(int module, const std::vector<int>& expert_out,
                              const std::vector<int>& slots, int weights, int64_t experts,
                              int64_t top_k) {
  if (expert_out.size() != static_cast<size_t>(experts) || slots.size() != expert_out.size())
    throw Error("moe_combine '" + op_name(module, "combine") +
                "': one output and one slots tensor per expert expected");
  const Shape w = shape(weights);  // a copy: add_tensor below may reallocate the tensors
  const Poly c = shape(expert_out[0]).back();
  Op op;
  op.name = op_name(module, "combine");
  op.type = OpType::moe_combine;
  op.module = module;
  op.inputs = expert_out;
  op.inputs.push_back(weights);
  op.inputs.insert(op.inputs.end(), slots.begin(), slots.end());
  op.outputs = {add_tensor(op.name + ".out", {w[0], w[1], c})};
  op.saved = op.inputs;
  // Per expert, Hugging Face computes y_e * w_e and index_add_s it into the
  // output; index_add_ saves that product (IndexAddBackward0._saved_source,
  // seen on torch 2.9.1) besides the product's own operands: an [n_e, C]
  // output per expert, kept for backward (docs/accuracy.md, mixture of experts).
  for (size_t e = 0; e < expert_out.size(); ++e) {
    const int weighted =
        add_tensor(op.name + ".weighted" + std::to_string(e), shape(expert_out[e]));
    op.outputs.push_back(weighted);
    op.saved.push_back(weighted);
  }
  Poly routed_rows;
  for (int y : expert_out) routed_rows += rows(y);
  op.fwd_flops = routed_rows * c * 2;
  op.bwd_flops = routed_rows * c * 3;
  op.attrs.num_experts = experts;
  op.attrs.top_k = top_k;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::sigmoid_gate(int module, const std::string& suffix, int gate, int x) {
  const Shape g = shape(gate);  // a copy: add_tensor below may reallocate the tensors
  if (g.empty() || g.back() != dim(1) || g.size() != shape(x).size())
    throw Error("sigmoid_gate '" + op_name(module, suffix) + "': expects a gate [.., 1]");
  Op op;
  op.name = op_name(module, suffix);
  op.type = OpType::sigmoid_gate;
  op.module = module;
  op.inputs = {gate, x};
  // F.sigmoid saves its output; the product saves both operands.
  op.outputs = {add_tensor(op.name + ".out", shape(x)), add_tensor(op.name + ".sigmoid", g)};
  op.saved = {x, op.outputs[1]};
  const Poly n = rows(x), nc = g_.tensors[x].numel();
  op.fwd_flops = nc + n * 4;
  op.bwd_flops = nc * 3 + n * 3;
  return add_op(std::move(op)).outputs[0];
}

}  // namespace shardscope::plan
