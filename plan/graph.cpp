#include "plan/graph.h"

#include <cstdint>
#include <stdexcept>
#include <tuple>
#include <unordered_set>

#include "plan/error.h"

namespace shardscope::plan {

int dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::f64:
      return 8;
    case DType::i64:
      return 8;
    case DType::i32:
      return 4;
    case DType::boolean:
    case DType::u8:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::f64:
      return "f64";
    case DType::i64:
      return "i64";
    case DType::i32:
      return "i32";
    case DType::boolean:
      return "bool";
    case DType::u8:
      return "u8";
  }
  return "?";
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::compute:
      return "compute";
    case Precision::fp32:
      return "fp32";
    case Precision::upcast_extra:
      return "upcast_extra";
    case Precision::fp32_if_lowp:
      return "fp32_if_lowp";
  }
  return "?";
}

Precision parse_precision(const std::string& name, const std::string& field) {
  for (const Precision p :
       {Precision::compute, Precision::fp32, Precision::upcast_extra, Precision::fp32_if_lowp})
    if (name == precision_name(p)) return p;
  throw Error(field + ": unknown precision '" + name +
              "' (use compute, fp32, upcast_extra or fp32_if_lowp)");
}

int precision_bytes(Precision p, int compute_bytes) {
  switch (p) {
    case Precision::compute:
      return compute_bytes;
    case Precision::fp32:
      return 4;
    case Precision::upcast_extra:
      return compute_bytes < 4 ? 4 - compute_bytes : 0;
    case Precision::fp32_if_lowp:
      return compute_bytes < 4 ? 4 : 0;
  }
  return compute_bytes;
}

DType parse_dtype(const std::string& name, const std::string& field) {
  static const std::pair<const char*, DType> kNames[] = {
      {"f32", DType::f32},      {"fp32", DType::f32},      {"float32", DType::f32},
      {"bf16", DType::bf16},    {"bfloat16", DType::bf16}, {"f16", DType::f16},
      {"fp16", DType::f16},     {"float16", DType::f16},   {"f64", DType::f64},
      {"fp64", DType::f64},     {"float64", DType::f64},   {"i64", DType::i64},
      {"int64", DType::i64},    {"i32", DType::i32},       {"int32", DType::i32},
      {"bool", DType::boolean}, {"u8", DType::u8},         {"uint8", DType::u8},
  };
  for (const auto& [n, d] : kNames)
    if (name == n) return d;
  throw Error(field + ": unknown dtype '" + name +
              "' (use f32, bf16, f16, f64, i64, i32, bool or u8)");
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f64;
}

int64_t Param::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n))
      throw Error("param '" + name + "': element count overflows int64");
  return n;
}

int64_t Tensor::numel_at(const Workload& w) const {
  int64_t n = 1;
  for (const Poly& d : shape)
    if (__builtin_mul_overflow(n, d.eval(w), &n))
      throw std::overflow_error("tensor '" + name + "': element count overflows int64");
  return n;
}

Poly Tensor::numel() const {
  Poly n = Poly::constant(1);
  for (const Poly& d : shape) n = n * d;
  return n;
}

int64_t Graph::params_total() const {
  int64_t total = 0;
  for (const Param& p : params)
    if (__builtin_add_overflow(total, p.numel(), &total))
      throw Error("graph '" + model_name + "': parameter total overflows int64");
  return total;
}

int Graph::find_module(const std::string& name) const {
  for (size_t i = 0; i < modules.size(); ++i)
    if (modules[i].name == name) return static_cast<int>(i);
  return -1;
}

int Graph::find_param(const std::string& name) const {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].name == name) return static_cast<int>(i);
  return -1;
}

namespace {

constexpr std::pair<const char*, OpType> kOpTypeNames[] = {
    {"embedding", OpType::embedding},
    {"linear", OpType::linear},
    {"layernorm", OpType::layernorm},
    {"rmsnorm", OpType::rmsnorm},
    {"attention", OpType::attention},
    {"gelu", OpType::gelu},
    {"swiglu", OpType::swiglu},
    {"residual", OpType::residual},
    {"cross_entropy", OpType::cross_entropy},
    {"rope", OpType::rope},
    {"relu", OpType::relu},
    {"scale", OpType::scale},
    {"softcap", OpType::softcap},
    {"moe_router", OpType::moe_router},
    {"moe_dispatch", OpType::moe_dispatch},
    {"moe_combine", OpType::moe_combine},
    {"sigmoid_gate", OpType::sigmoid_gate},
    {"aten", OpType::aten},
};

constexpr std::pair<const char*, AtenKind> kAtenKindNames[] = {
    {"gemm", AtenKind::gemm},
    {"attention", AtenKind::attention},
    {"memory", AtenKind::memory},
};

auto attr_tuple(const OpAttrs& a) {
  return std::tie(a.num_embeddings, a.embedding_dim, a.positions, a.position_offset, a.padding_idx,
                  a.in_features, a.out_features, a.bias, a.weight_layout, a.tied, a.eps, a.dim,
                  a.weight_offset, a.n_head, a.n_kv_head, a.head_dim, a.scale, a.rope, a.rope_theta,
                  a.rope_scaling, a.sliding_window, a.softcap, a.causal, a.qkv_packed,
                  a.qkv_per_head, a.rotary_dim, a.rope_cat, a.repeat_kv, a.approximate,
                  a.activation, a.packed, a.broadcast, a.classes, a.valid_classes, a.reduction,
                  a.num_experts, a.top_k, a.expert, a.norm_topk_prob, a.aten, a.kind);
}

}  // namespace

const char* op_type_name(OpType type) {
  for (const auto& [n, t] : kOpTypeNames)
    if (t == type) return n;
  return "?";
}

OpType parse_op_type(const std::string& name, const std::string& field) {
  for (const auto& [n, t] : kOpTypeNames)
    if (name == n) return t;
  std::string known;
  for (const auto& [n, t] : kOpTypeNames) known += (known.empty() ? "" : ", ") + std::string(n);
  throw Error(field + ": unknown op type '" + name + "' (expected one of: " + known + ")");
}

const char* aten_kind_name(AtenKind kind) {
  for (const auto& [n, k] : kAtenKindNames)
    if (k == kind) return n;
  return "?";
}

AtenKind parse_aten_kind(const std::string& name, const std::string& field) {
  for (const auto& [n, k] : kAtenKindNames)
    if (name == n) return k;
  throw Error(field + ": unknown kind '" + name + "' (one of gemm, attention, memory)");
}

bool is_gemm(const Op& op) {
  return op.type == OpType::linear ||
         (op.type == OpType::aten && op.attrs.kind == aten_kind_name(AtenKind::gemm));
}

bool backward_returns_views_of_output_grad(const Op& op) {
  // Only these two: split / chunk / unbind backward concatenate (a new tensor),
  // slice / select backward scatter into a new zero tensor.
  return op.type == OpType::aten && op.outputs.size() == 1 &&
         (op.attrs.aten == "aten.cat.default" || op.attrs.aten == "aten.stack.default");
}

bool OpAttrs::operator==(const OpAttrs& other) const {
  return attr_tuple(*this) == attr_tuple(other);
}

namespace {

bool has_negative_coefficient(const Poly& p) {
  for (const auto& [key, c] : p.terms())
    if (c < 0) return true;
  for (const auto& [key, c] : p.routed_terms())
    if (c < 0) return true;
  return false;
}

}  // namespace

void Graph::validate() const {
  const std::string where = "graph '" + model_name + "': ";
  auto fail = [&where](const std::string& what) { throw Error(where + what); };
  auto in_range = [](int index, size_t size) {
    return index >= 0 && static_cast<size_t>(index) < size;
  };

  if (max_seq_len < 1) fail("max_seq_len must be >= 1, got " + std::to_string(max_seq_len));
  if (vocab_size < 0) fail("vocab_size must be >= 0, got " + std::to_string(vocab_size));

  // Modules: pre-order tree rooted at modules[0] with dotted names.
  if (modules.empty()) fail("no modules (modules[0] must be the root)");
  if (!modules[0].name.empty() || modules[0].parent != -1)
    fail("modules[0] must be the root: name \"\" and parent -1, got '" + modules[0].name + "'");
  std::vector<std::vector<int>> expected_children(modules.size());
  std::unordered_set<std::string> module_names;
  for (size_t i = 0; i < modules.size(); ++i) {
    const Module& m = modules[i];
    const std::string label = "module " + std::to_string(i) + " '" + m.name + "'";
    if (m.class_name.empty()) fail(label + " has no class_name");
    if (!module_names.insert(m.name).second) fail(label + ": duplicate module name");
    if (i == 0) continue;
    if (m.parent < 0 || static_cast<size_t>(m.parent) >= i)
      fail(label + ": parent " + std::to_string(m.parent) +
           " must be an earlier module (modules are stored in pre-order)");
    const std::string& parent_name = modules[m.parent].name;
    const std::string prefix = parent_name.empty() ? "" : parent_name + ".";
    const bool prefixed =
        m.name.size() > prefix.size() && m.name.compare(0, prefix.size(), prefix) == 0;
    if (!prefixed || m.name.find('.', prefix.size()) != std::string::npos)
      fail(label + ": name must be '" + prefix + "<local name>' under its parent '" + parent_name +
           "'");
    expected_children[m.parent].push_back(static_cast<int>(i));
  }
  for (size_t i = 0; i < modules.size(); ++i) {
    if (modules[i].children != expected_children[i])
      fail("module '" + modules[i].name +
           "': children list does not match the modules whose parent it is (in storage order)");
    // Pre-order: a module's subtree is contiguous, so each child follows the
    // previous child's subtree. Checked via parents: the module after i is
    // either i's child or belongs to an ancestor of i.
    if (i + 1 < modules.size()) {
      int a = static_cast<int>(i);
      const int next_parent = modules[i + 1].parent;
      while (a != -1 && a != next_parent) a = modules[a].parent;
      if (a == -1)
        fail("module '" + modules[i + 1].name + "' breaks pre-order (its parent '" +
             modules[next_parent].name + "' is not an ancestor of the module stored before it)");
    }
  }

  // Parameters.
  std::unordered_set<std::string> param_names;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    const std::string label = "param '" + p.name + "'";
    if (p.name.empty()) fail("param " + std::to_string(i) + " has an empty name");
    if (!param_names.insert(p.name).second) fail(label + ": duplicate parameter name");
    if (!in_range(p.module, modules.size()))
      fail(label + ": declaring module index " + std::to_string(p.module) + " out of range");
    if (p.shape.empty()) fail(label + ": empty shape");
    for (int64_t d : p.shape)
      if (d < 1) fail(label + ": dimension " + std::to_string(d) + " is not positive");
    p.numel();  // throws on overflow
  }

  // Tensors.
  std::unordered_set<std::string> tensor_names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const std::string label = "tensor '" + t.name + "'";
    if (t.name.empty()) fail("tensor " + std::to_string(i) + " has an empty name");
    if (!tensor_names.insert(t.name).second) fail(label + ": duplicate tensor name");
    for (const Poly& d : t.shape)
      if (d.is_zero() || has_negative_coefficient(d))
        fail(label + ": dimension \"" + d.to_string() + "\" must have positive coefficients");
  }

  // Graph inputs are fed from data; they are never produced by an op.
  std::vector<char> available(tensors.size(), 0);
  std::vector<char> is_input(tensors.size(), 0);
  for (int t : inputs) {
    if (!in_range(t, tensors.size()))
      fail("graph input index " + std::to_string(t) + " out of range");
    if (is_input[t]) fail("tensor '" + tensors[t].name + "' listed twice as a graph input");
    is_input[t] = available[t] = 1;
  }
  // Buffers are resident from the start of the step; no op writes them.
  std::vector<char> is_buffer(tensors.size(), 0);
  for (int t : buffers) {
    if (!in_range(t, tensors.size())) fail("buffer index " + std::to_string(t) + " out of range");
    const std::string label = "buffer tensor '" + tensors[t].name + "'";
    if (is_buffer[t]) fail(label + " listed twice in buffers");
    if (is_input[t]) fail(label + " is also a graph input");
    if (is_floating(tensors[t].dtype) && tensors[t].requires_grad)
      fail(label + " must have requires_grad false (a buffer gets no gradient)");
    is_buffer[t] = available[t] = 1;
  }
  for (size_t i = 0; i < default_wrap_classes.size(); ++i)
    if (default_wrap_classes[i].empty())
      fail("default_wrap_classes[" + std::to_string(i) + "] is empty");

  // Ops, in forward order.
  std::unordered_set<std::string> op_names;
  std::vector<char> param_used(params.size(), 0);
  // owner[t] == i: tensor t is an input or output of op i (an op may save only
  // those). A stamp per op keeps the check linear in the op's tensors (a
  // mixture-of-experts combine reads, writes and saves a few per expert).
  std::vector<size_t> owner(tensors.size(), SIZE_MAX);
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const std::string label = "op '" + op.name + "'";
    if (op.name.empty()) fail("op " + std::to_string(i) + " has an empty name");
    if (!op_names.insert(op.name).second) fail(label + ": duplicate op name");
    if (!in_range(op.module, modules.size()))
      fail(label + ": module index " + std::to_string(op.module) + " out of range");
    if (op.type == OpType::aten) {
      if (!op.attrs.aten || op.attrs.aten->empty())
        fail(label + ": an aten op needs attrs.aten (the overload, e.g. \"aten.mm.default\")");
      if (!op.attrs.kind) fail(label + ": an aten op needs attrs.kind (gemm, attention or memory)");
      parse_aten_kind(*op.attrs.kind, label + ": attrs.kind");
    }
    if (op.attrs.valid_classes && (*op.attrs.valid_classes < 1 || !op.attrs.classes ||
                                   *op.attrs.valid_classes > *op.attrs.classes))
      fail(label + ": valid_classes " + std::to_string(*op.attrs.valid_classes) +
           " must be in [1, classes " +
           (op.attrs.classes ? std::to_string(*op.attrs.classes) : std::string("(absent)")) + "]");
    for (int t : op.inputs) {
      if (!in_range(t, tensors.size()))
        fail(label + ": input tensor index " + std::to_string(t) + " out of range");
      if (!available[t])
        fail(label + " reads tensor '" + tensors[t].name +
             "' before any op produces it (and it is not a graph input)");
    }
    if (op.outputs.empty()) fail(label + " has no outputs");
    for (int t : op.outputs) {
      if (!in_range(t, tensors.size()))
        fail(label + ": output tensor index " + std::to_string(t) + " out of range");
      if (available[t])
        fail(label + " writes tensor '" + tensors[t].name +
             "', which is a graph input, a buffer or already produced");
      available[t] = 1;
    }
    for (int t : op.inputs) owner[t] = i;
    for (int t : op.outputs) owner[t] = i;
    for (int p : op.params) {
      if (!in_range(p, params.size()))
        fail(label + ": parameter index " + std::to_string(p) + " out of range");
      param_used[p] = 1;
    }
    for (int t : op.saved) {
      if (!in_range(t, tensors.size()))
        fail(label + ": saved tensor index " + std::to_string(t) + " out of range");
      if (owner[t] != i)
        fail(label + " saves tensor '" + tensors[t].name + "', which it neither reads nor writes");
    }
    const std::pair<const char*, const Poly*> costs[] = {{"fwd_flops", &op.fwd_flops},
                                                         {"bwd_flops", &op.bwd_flops},
                                                         {"fwd_bytes", &op.fwd_bytes},
                                                         {"bwd_bytes", &op.bwd_bytes},
                                                         {"workspace_bytes", &op.workspace_bytes}};
    for (const auto& [field, poly] : costs)
      if (has_negative_coefficient(*poly))
        fail(label + ": " + field + " \"" + poly->to_string() + "\" has a negative coefficient");
    for (const auto* temps : {&op.fwd_temps, &op.bwd_temps})
      for (const Temp& t : *temps)
        if (has_negative_coefficient(t.numel))
          fail(label + ": temporary of \"" + t.numel.to_string() + "\" elements has a negative " +
               "coefficient");
  }
  for (size_t p = 0; p < params.size(); ++p)
    if (!param_used[p]) fail("param '" + params[p].name + "' is not used by any op");

  if (!in_range(loss, tensors.size()))
    fail("loss tensor index " + std::to_string(loss) + " out of range");
  if (is_input[loss]) fail("loss tensor '" + tensors[loss].name + "' is a graph input");
  if (!available[loss]) fail("loss tensor '" + tensors[loss].name + "' is not produced by any op");
  if (!tensors[loss].shape.empty())
    fail("loss tensor '" + tensors[loss].name + "' must be a scalar (empty shape)");
}

}  // namespace shardscope::plan
