// GraphBuilder (plan/graph_builder.h): modules, parameters, tensors and ops
// with their costs, in forward order; the op families of the mixture of
// experts and of Gemma/Phi-3 are in graph_builder_moe.cpp and
// graph_builder_ops.cpp.
#include "plan/graph_builder.h"

#include <algorithm>
#include <utility>

#include "plan/error.h"

namespace shardscope::plan {

Poly dim_b() {
  return Poly::term(1, 1, 0);
}
Poly dim_t() {
  return Poly::term(1, 0, 1);
}
Poly dim(int64_t n) {
  return Poly::constant(n);
}

GraphBuilder::GraphBuilder(std::string model_name, std::string family, int64_t max_seq_len,
                           int64_t vocab_size) {
  g_.model_name = std::move(model_name);
  g_.family = std::move(family);
  g_.max_seq_len = max_seq_len;
  g_.vocab_size = vocab_size;
}

int GraphBuilder::add_module(int parent, const std::string& local_name,
                             const std::string& class_name, bool is_container) {
  Module m;
  m.class_name = class_name;
  m.parent = parent;
  m.is_container = is_container;
  const int index = static_cast<int>(g_.modules.size());
  if (parent >= 0) {
    const std::string& p = g_.modules[parent].name;
    m.name = p.empty() ? local_name : p + "." + local_name;
    g_.modules[parent].children.push_back(index);
  }
  g_.modules.push_back(std::move(m));
  return index;
}

int GraphBuilder::add_param(int module, const std::string& local_name, std::vector<int64_t> shape) {
  Param p;
  const std::string& m = g_.modules[module].name;
  p.name = m.empty() ? local_name : m + "." + local_name;
  p.shape = std::move(shape);
  p.module = module;
  g_.params.push_back(std::move(p));
  return static_cast<int>(g_.params.size()) - 1;
}

int GraphBuilder::add_tensor(const std::string& name, Shape shape, DType dtype,
                             Precision precision) {
  Tensor t;
  t.name = name;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.precision = precision;
  g_.tensors.push_back(std::move(t));
  return static_cast<int>(g_.tensors.size()) - 1;
}

int GraphBuilder::add_input(const std::string& name, Shape shape, DType dtype) {
  const int t = add_tensor(name, std::move(shape), dtype);
  g_.inputs.push_back(t);
  return t;
}

std::string GraphBuilder::op_name(int module, const std::string& suffix) const {
  const std::string& m = g_.modules[module].name;
  if (suffix.empty()) return m;
  return m.empty() ? suffix : m + "." + suffix;
}

Poly GraphBuilder::rows(int tensor) const {
  Poly n = dim(1);
  const Shape& s = shape(tensor);
  for (size_t i = 0; i + 1 < s.size(); ++i) n = n * s[i];
  return n;
}

void set_op_byte_costs(const Graph& g, Op& op, const Poly* param_traffic) {
  auto tensor_bytes = [&g](int t) {
    const Tensor& tensor = g.tensors[t];
    return tensor.numel() * (is_floating(tensor.dtype) ? 4 : dtype_bytes(tensor.dtype));
  };
  Poly params_elems;
  if (param_traffic) {
    params_elems = *param_traffic;
  } else {
    for (int p : op.params) params_elems += dim(g.params[p].numel());
  }
  Poly fwd = params_elems * 4;
  for (int t : op.inputs) fwd += tensor_bytes(t);
  for (int t : op.outputs) fwd += tensor_bytes(t);
  // Backward: read dY (outputs[0]), saved tensors and parameters; write the
  // gradients of the floating inputs produced by ops and of the parameters.
  Poly bwd = params_elems * 8 + tensor_bytes(op.outputs[0]);
  for (int t : op.saved) bwd += tensor_bytes(t);
  for (int t : op.inputs) {
    const bool from_data =
        std::find(g.inputs.begin(), g.inputs.end(), t) != g.inputs.end();  // no gradient
    if (is_floating(g.tensors[t].dtype) && !from_data) bwd += tensor_bytes(t);
  }
  op.fwd_bytes = fwd;
  op.bwd_bytes = bwd;
}

Op& GraphBuilder::add_op(Op op, const Poly* param_traffic) {
  set_op_byte_costs(g_, op, param_traffic);
  g_.ops.push_back(std::move(op));
  return g_.ops.back();
}

int GraphBuilder::embedding(int module, int ids, int64_t rows_count, int64_t dim_size,
                            int64_t padding_idx) {
  const int weight = add_param(module, "weight", {rows_count, dim_size});
  Shape out_shape = shape(ids);
  out_shape.push_back(dim(dim_size));
  Op op;
  op.name = op_name(module, "");
  op.type = OpType::embedding;
  op.module = module;
  op.inputs = {ids};
  op.outputs = {add_tensor(op.name + ".out", out_shape)};
  op.params = {weight};
  op.saved = {ids};
  const Poly n = g_.tensors[ids].numel();
  const Poly gathered = n * dim_size;
  op.bwd_flops = gathered;
  op.attrs.num_embeddings = rows_count;
  op.attrs.embedding_dim = dim_size;
  if (padding_idx >= 0) op.attrs.padding_idx = padding_idx;
  return add_op(std::move(op), &gathered).outputs[0];
}

int GraphBuilder::position_embedding(int module, int64_t rows_count, int64_t dim_size,
                                     int64_t module_buffer_bytes, int64_t offset) {
  const int weight = add_param(module, "weight", {rows_count, dim_size});
  Op op;
  op.name = op_name(module, "");
  op.type = OpType::embedding;
  op.module = module;
  op.outputs = {add_tensor(op.name + ".out", {dim_t(), dim(dim_size)})};
  if (module_buffer_bytes > 0) {
    // The model's non-parameter module buffers (GPT-2's causal masks),
    // which FSDP does not shard, as fp32 elements of the same bytes. They
    // exist for the whole run; kept by the first op from its forward to its
    // backward, they are counted through all of forward and backward (not
    // during the optimizer step), checkpointing or not.
    op.outputs.push_back(add_tensor("module_buffers", {dim((module_buffer_bytes + 3) / 4)},
                                    DType::f32, Precision::fp32));
    op.saved.push_back(op.outputs.back());
  }
  op.params = {weight};
  const Poly gathered = dim_t() * dim_size;
  op.bwd_flops = gathered;
  op.attrs.num_embeddings = rows_count;
  op.attrs.embedding_dim = dim_size;
  op.attrs.positions = true;
  if (offset != 0) op.attrs.position_offset = offset;
  return add_op(std::move(op), &gathered).outputs[0];
}

int GraphBuilder::linear(int module, int x, int64_t in, int64_t out, bool bias, WeightLayout layout,
                         int tied_weight) {
  Op op;
  op.name = op_name(module, "");
  op.type = OpType::linear;
  op.module = module;
  if (tied_weight >= 0) {
    op.params = {tied_weight};
    bias = false;
  } else {
    op.params = {add_param(module, "weight",
                           layout == WeightLayout::out_in ? std::vector<int64_t>{out, in}
                                                          : std::vector<int64_t>{in, out})};
    if (bias) op.params.push_back(add_param(module, "bias", {out}));
  }
  Shape out_shape = shape(x);
  out_shape.back() = dim(out);
  op.inputs = {x};
  op.outputs = {add_tensor(op.name + ".out", out_shape)};
  op.saved = {x};
  const Poly n = rows(x);
  const Poly bias_flops = bias ? n * out : Poly();
  op.fwd_flops = n * (2 * in * out) + bias_flops;
  op.bwd_flops = n * (4 * in * out) + bias_flops;
  op.attrs.in_features = in;
  op.attrs.out_features = out;
  op.attrs.bias = bias;
  op.attrs.weight_layout = layout == WeightLayout::out_in ? "out_in" : "in_out";
  if (tied_weight >= 0) op.attrs.tied = true;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::layernorm(int module, int x, int64_t dim_size, double eps) {
  Op op;
  op.name = op_name(module, "");
  op.type = OpType::layernorm;
  op.module = module;
  op.params = {add_param(module, "weight", {dim_size}), add_param(module, "bias", {dim_size})};
  Shape stats_shape(shape(x).begin(), shape(x).end() - 1);
  op.inputs = {x};
  op.outputs = {add_tensor(op.name + ".out", shape(x)),
                add_tensor(op.name + ".mean", stats_shape, DType::f32, Precision::fp32),
                add_tensor(op.name + ".rstd", stats_shape, DType::f32, Precision::fp32)};
  op.saved = {x, op.outputs[1], op.outputs[2]};
  const Poly n = g_.tensors[x].numel();
  op.fwd_flops = n * 8;
  op.bwd_flops = n * 16;
  op.attrs.eps = eps;
  op.attrs.dim = dim_size;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::rmsnorm(int module, int x, int64_t dim_size, double eps, double weight_offset,
                          int64_t groups) {
  if (groups < 1) throw Error("rmsnorm '" + op_name(module, "") + "': groups < 1");
  Op op;
  op.name = op_name(module, "");
  op.type = OpType::rmsnorm;
  op.module = module;
  op.params = {add_param(module, "weight", {dim_size})};
  Shape stats_shape(shape(x).begin(), shape(x).end() - 1);
  if (groups > 1) stats_shape.push_back(dim(groups));  // one rstd per head: [B, T, H]
  op.inputs = {x};
  // LlamaRMSNorm: x.to(fp32); rsqrt(pow(x, 2).mean(-1) + eps) (result saved,
  // fp32); x * rsqrt (saves the fp32 x); .to(input dtype); weight * that
  // (saves the normalised value). In fp32 the copy is x itself.
  // GemmaRMSNorm (weight_offset 1): the same in fp32, then normed * (1 +
  // weight.float()) (saves the fp32 normalised value) and .type_as(x): the
  // fp32 product is a forward temporary below fp32. The C-sized fp32 (1 +
  // weight) it also saves is not counted.
  const bool gemma = weight_offset != 0.0;
  op.outputs = {add_tensor(op.name + ".out", shape(x)),
                add_tensor(op.name + ".rstd", stats_shape, DType::f32, Precision::fp32),
                add_tensor(op.name + ".normed", shape(x), DType::f32,
                           gemma ? Precision::fp32 : Precision::compute),
                add_tensor(op.name + ".x_fp32", shape(x), DType::f32, Precision::upcast_extra)};
  op.saved = {x, op.outputs[1], op.outputs[2], op.outputs[3]};
  const Poly n = g_.tensors[x].numel();
  if (gemma) op.fwd_temps = {Temp{n, Precision::fp32_if_lowp}};
  op.fwd_flops = n * 4;
  op.bwd_flops = n * 8;
  op.attrs.eps = eps;
  op.attrs.dim = dim_size;
  if (gemma) op.attrs.weight_offset = weight_offset;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::attention(int module, const std::vector<int>& qkv, int64_t n_head,
                            int64_t n_kv_head, int64_t head_dim, OpAttrs attrs) {
  Op op;
  op.name = op_name(module, "attention");
  op.type = OpType::attention;
  op.module = module;
  op.inputs = qkv;
  // q's layout fixes B and T: [B, T, H*D] (or packed [B, T, 3*H*D]).
  const Shape& q = shape(qkv[0]);
  const Poly b = q[0], t = q[1];
  // SDPA (flash) keeps q, k, v, its output and the fp32 log-sum-exp; the
  // output is laid out [B, T, H, D], so transpose(1, 2).contiguous() is no
  // copy and o_proj saves the same tensor (saved-tensor hooks under FSDP2,
  // torch 2.9.1).
  op.outputs = {add_tensor(op.name + ".out", {b, t, dim(n_head * head_dim)}),
                add_tensor(op.name + ".lse", {b, dim(n_head), t}, DType::f32, Precision::fp32)};
  const bool rope = attrs.rope.value_or(false);
  if (rope && qkv.size() == 1) {
    // RoPE on a packed projection (GPT-NeoX's query_key_value): q and k are
    // rotated into new tensors that SDPA saves, while v, a view of the packed
    // output, keeps all of it alive: roped copies of q and k on top of it.
    op.outputs.push_back(add_tensor(op.name + ".q_roped", {b, t, dim(n_head * head_dim)}));
    op.outputs.push_back(add_tensor(op.name + ".k_roped", {b, t, dim(n_kv_head * head_dim)}));
  }
  if (attrs.qkv_per_head.value_or(false) || attrs.rope_cat.value_or(false)) {
    // GPT-NeoX's and Phi-3's rotary ends in torch.cat, whose result is
    // contiguous [B, H, T, D]; SDPA lays its output out like q, so
    // transpose(1, 2).contiguous() copies it: SDPA keeps its own output and
    // dense saves the copy (outputs[0]). Measured with saved-tensor hooks,
    // torch 2.9.1.
    op.outputs.push_back(add_tensor(op.name + ".out_bhtd", {b, t, dim(n_head * head_dim)}));
  }
  op.saved = qkv;
  for (int o : op.outputs) op.saved.push_back(o);
  const Poly square = b * t * t * (n_head * head_dim);  // B*T^2*H*D
  op.fwd_flops = square * 4;
  op.bwd_flops = square * 10;
  if (rope) {
    const int64_t rotary = attrs.rotary_dim.value_or(head_dim);
    const Poly rope_flops = b * t * (3 * (n_head + n_kv_head) * rotary);
    op.fwd_flops = op.fwd_flops + rope_flops;
    op.bwd_flops = op.bwd_flops + rope_flops;
  }
  if (attrs.softcap) {  // divide, tanh, multiply per score; backward 1 - t^2 and the product
    const Poly scores = b * t * t * n_head;
    op.fwd_flops = op.fwd_flops + scores * 3;
    op.bwd_flops = op.bwd_flops + scores * 3;
  }
  attrs.n_head = n_head;
  attrs.n_kv_head = n_kv_head;
  attrs.head_dim = head_dim;
  attrs.causal = true;
  attrs.qkv_packed = qkv.size() == 1;
  op.attrs = std::move(attrs);
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::gelu(int module, int x, const std::string& approximate, int unfused_saved,
                       int unfused_bwd_temps) {
  Op op;
  op.name = op_name(module, "");
  op.type = OpType::gelu;
  op.module = module;
  op.inputs = {x};
  op.outputs = {add_tensor(op.name + ".out", shape(x))};
  op.saved = {x};
  for (int i = 0; i < unfused_saved; ++i) {
    op.outputs.push_back(add_tensor(op.name + ".saved" + std::to_string(i), shape(x)));
    op.saved.push_back(op.outputs.back());
  }
  if (unfused_bwd_temps > 0)
    op.bwd_temps.push_back(Temp{g_.tensors[x].numel() * unfused_bwd_temps, Precision::compute});
  const Poly n = g_.tensors[x].numel();
  op.fwd_flops = n * 8;
  op.bwd_flops = n * 16;
  op.attrs.approximate = approximate;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::relu(int module, int x) {
  Op op;
  op.name = op_name(module, "");
  op.type = OpType::relu;
  op.module = module;
  op.inputs = {x};
  op.outputs = {add_tensor(op.name + ".out", shape(x))};
  op.saved = {op.outputs[0]};  // PyTorch's relu saves its result
  const Poly n = g_.tensors[x].numel();
  op.fwd_flops = n;
  op.bwd_flops = n;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::swiglu(int module, int gate, int up, const std::string& activation,
                         int unfused_saved, int unfused_bwd_temps) {
  Op op;
  op.name = op_name(module, "swiglu");
  op.type = OpType::swiglu;
  op.module = module;
  op.inputs = {gate, up};
  // LlamaMLP: down_proj(act_fn(gate) * up): act_fn saves gate, the product
  // saves act_fn(gate) and up.
  op.outputs = {add_tensor(op.name + ".out", shape(gate)),
                add_tensor(op.name + ".act", shape(gate))};
  op.saved = {gate, up, op.outputs[1]};
  for (int i = 0; i < unfused_saved; ++i) {
    op.outputs.push_back(add_tensor(op.name + ".saved" + std::to_string(i), shape(gate)));
    op.saved.push_back(op.outputs.back());
  }
  if (unfused_bwd_temps > 0)
    op.bwd_temps.push_back(Temp{g_.tensors[gate].numel() * unfused_bwd_temps, Precision::compute});
  const Poly n = g_.tensors[gate].numel();
  op.fwd_flops = n * 5;
  op.bwd_flops = n * 10;
  op.attrs.activation = activation;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::residual(int module, const std::string& suffix, int a, int b) {
  Op op;
  op.name = op_name(module, suffix);
  op.type = OpType::residual;
  op.module = module;
  op.inputs = {a, b};
  // The larger operand gives the shape (GPT-2 adds wpe [T, C] to wte [B, T, C]).
  const int big = shape(a).size() >= shape(b).size() ? a : b;
  op.outputs = {add_tensor(op.name + ".out", shape(big))};
  const Poly n = g_.tensors[big].numel();
  op.fwd_flops = n;
  op.bwd_flops = n;
  if (shape(a) != shape(b)) op.attrs.broadcast = true;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::cross_entropy(int module, int logits, int labels, int64_t classes) {
  Op op;
  op.name = op_name(module, "cross_entropy");
  op.type = OpType::cross_entropy;
  op.module = module;
  op.inputs = {logits, labels};
  op.outputs = {add_tensor("loss", {}),
                add_tensor(op.name + ".log_probs", shape(logits), DType::f32, Precision::fp32)};
  op.saved = {op.outputs[1], labels};
  const Poly n = g_.tensors[logits].numel();
  // ForCausalLMLoss: logits.float() lives until log_softmax has run; in
  // backward nll_loss's gradient (fp32) then log_softmax's (fp32 below fp32;
  // in fp32 it is the logits' gradient itself) are live at once with the
  // saved log-probabilities; the nll gradient is dropped, then the second is
  // cast into the logits' gradient (the op's result) and dropped. Temps are
  // allocated in this order, each freed once the next exists (compute_op).
  op.fwd_temps = {Temp{n, Precision::fp32_if_lowp}};
  op.bwd_temps = {Temp{n, Precision::fp32}, Temp{n, Precision::fp32_if_lowp}};
  op.fwd_flops = n * 5;
  op.bwd_flops = n * 3;
  op.attrs.classes = classes;
  op.attrs.reduction = "mean";
  return add_op(std::move(op)).outputs[0];
}

Graph GraphBuilder::finish(int loss) {
  g_.loss = loss;
  g_.validate();
  return std::move(g_);
}

}  // namespace shardscope::plan
