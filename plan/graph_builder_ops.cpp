// GraphBuilder ops added for the Gemma, Gemma 2 and Phi-3 families: the
// embedding normalizer (scale), logit soft-capping (softcap) and Phi-3's
// packed gate_up gated MLP. Costs as documented in plan/graph_builder.h.
#include "plan/error.h"
#include "plan/graph_builder.h"

namespace shardscope::plan {

int GraphBuilder::swiglu_packed(int module, int gate_up, int64_t f, const std::string& activation) {
  Op op;
  op.name = op_name(module, "swiglu");
  op.type = OpType::swiglu;
  op.module = module;
  op.inputs = {gate_up};
  Shape out_shape = shape(gate_up);
  out_shape.back() = dim(f);
  // Phi3MLP: gate, up = gate_up.chunk(2, -1) (views); up * act_fn(gate):
  // act_fn saves gate and the product saves up, views that keep the whole
  // [.., 2F] output alive, and act_fn(gate).
  op.outputs = {add_tensor(op.name + ".out", out_shape), add_tensor(op.name + ".act", out_shape)};
  op.saved = {gate_up, op.outputs[1]};
  const Poly n = g_.tensors[op.outputs[0]].numel();
  op.fwd_flops = n * 5;
  op.bwd_flops = n * 10;
  op.attrs.activation = activation;
  op.attrs.packed = true;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::scale(int module, const std::string& suffix, int x, double factor) {
  Op op;
  op.name = op_name(module, suffix);
  op.type = OpType::scale;
  op.module = module;
  op.inputs = {x};
  // x * torch.tensor(c, dtype=x.dtype): the multiply saves only the 0-dim
  // constant (no gradient flows to it).
  op.outputs = {add_tensor(op.name + ".out", shape(x))};
  const Poly n = g_.tensors[x].numel();
  op.fwd_flops = n;
  op.bwd_flops = n;
  op.attrs.scale = factor;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::softcap(int module, const std::string& suffix, int x, double cap) {
  if (!(cap > 0)) throw Error("softcap '" + op_name(module, suffix) + "': the cap must be > 0");
  Op op;
  op.name = op_name(module, suffix);
  op.type = OpType::softcap;
  op.module = module;
  op.inputs = {x};
  // x / c (saves nothing), tanh (saves its output), * c (saves nothing). The
  // quotient lives only inside the op; the input is held until the op ends.
  op.outputs = {add_tensor(op.name + ".out", shape(x)), add_tensor(op.name + ".tanh", shape(x))};
  op.saved = {op.outputs[1]};
  const Poly n = g_.tensors[x].numel();
  op.fwd_flops = n * 3;
  op.bwd_flops = n * 4;
  op.attrs.softcap = cap;
  return add_op(std::move(op)).outputs[0];
}

}  // namespace shardscope::plan
