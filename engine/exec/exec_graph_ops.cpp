// Forward, backward and recompute of graph ops (engine/cpu/ops.h): which
// buffer holds each operand follows from the op's buffer list (plan/'s
// compute_op): parameters in their unit's unsharded buffer (or the shard
// itself for in-place DDP), activation tensors by tensor id ("act", "rc",
// "input"), gradients of tensors ("grad") and of parameters
// ("unsharded_grad", or the gradient shard for in-place DDP).
#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "engine/cpu/ops.h"
#include "engine/exec/f32_view.h"
#include "engine/exec/rank_executor.h"

namespace shardscope::engine::exec {

namespace {
bool is(const char* what, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (std::strcmp(what, n) == 0) return true;
  return false;
}
}  // namespace

void RankExecutor::run_graph_op(const Task& task, const plan::ScheduleOp& sop) {
  const plan::Op& op = g_.ops[static_cast<size_t>(sop.graph_op)];
  const bool backward = sop.kind == plan::OpKind::backward;

  auto find = [&](const std::function<bool(const plan::Buffer&)>& pred) -> int {
    for (size_t i = 0; i < sop.buffers.size(); ++i)
      if (pred(s_.buffers[static_cast<size_t>(sop.buffers[i])])) return static_cast<int>(i);
    return -1;
  };
  auto numel = [&](int t) { return g_.tensors[static_cast<size_t>(t)].numel_at(w_); };
  auto last_dim = [&](int t) { return g_.tensors[static_cast<size_t>(t)].shape.back().eval(w_); };
  auto missing = [&](const std::string& what) {
    return ExecError("op '" + op.name + "' (" + plan::op_kind_name(sop.kind) + ", micro-step " +
                     std::to_string(sop.micro_step) + "): no buffer for " + what);
  };
  // fp32 view of tensor t's value (read) or of a new output (write).
  auto value = [&](int t, bool output) {
    const int i = find([&](const plan::Buffer& b) {
      return b.tensor == t &&
             (output ? is(b.what, {"act", "rc"}) : is(b.what, {"act", "rc", "input"}));
    });
    if (i < 0) throw missing("tensor '" + g_.tensors[static_cast<size_t>(t)].name + "'");
    return F32View(task.ptrs[static_cast<size_t>(i)],
                   buffer_dtype(sop.buffers[static_cast<size_t>(i)]), 0, numel(t), !output, output);
  };
  auto ids = [&](int t) -> const int64_t* {
    const int i = find([&](const plan::Buffer& b) {
      return b.tensor == t && is(b.what, {"input", "act"});
    });
    if (i < 0) throw missing("input '" + g_.tensors[static_cast<size_t>(t)].name + "'");
    return static_cast<const int64_t*>(task.ptrs[static_cast<size_t>(i)]);
  };
  // Gradient of tensor t (accumulated into); nullopt when the plan has none.
  auto grad = [&](int t) -> std::optional<F32View> {
    const int i =
        find([&](const plan::Buffer& b) { return b.tensor == t && is(b.what, {"grad"}); });
    if (i < 0) return std::nullopt;
    return F32View(task.ptrs[static_cast<size_t>(i)],
                   buffer_dtype(sop.buffers[static_cast<size_t>(i)]), 0, numel(t), true, true);
  };
  auto param_view = [&](int p, bool gradient) {
    const int u = up_.param_unit[static_cast<size_t>(p)];
    const int i = find([&](const plan::Buffer& b) {
      return b.unit == u && (gradient ? is(b.what, {"unsharded_grad", "grad_shard"})
                                      : is(b.what, {"unsharded", "param_shard", "h2d_shard"}));
    });
    const plan::Param& param = g_.params[static_cast<size_t>(p)];
    if (i < 0) throw missing((gradient ? "the gradient of " : "") + param.name);
    const ParamPlace* pp = layouts_[static_cast<size_t>(u)].find(p);
    return F32View(task.ptrs[static_cast<size_t>(i)],
                   buffer_dtype(sop.buffers[static_cast<size_t>(i)]), pp->unsharded, pp->numel,
                   true, gradient);
  };
  auto attr_d = [&](const char* key, double fallback) { return op.attrs.value(key, fallback); };
  auto attr_i = [&](const char* key) {
    if (!op.attrs.contains(key)) throw missing(std::string("attribute ") + key);
    return op.attrs.at(key).get<int64_t>();
  };

  const std::string& type = op.type;
  if (type == "embedding") {
    const int64_t rows = attr_i("num_embeddings"), dim = attr_i("embedding_dim");
    const int out = op.outputs[0];
    const int64_t n = numel(out) / dim;
    const int64_t* id = op.inputs.empty() ? nullptr : ids(op.inputs[0]);
    if (!backward) {
      F32View table = param_view(op.params[0], false);
      F32View y = value(out, true);
      cpu::embedding_forward(id, table.data(), y.data(), n, rows, dim);
    } else {
      auto dy = grad(out);
      if (!dy) throw missing("the gradient of " + g_.tensors[static_cast<size_t>(out)].name);
      F32View dtable = param_view(op.params[0], true);
      cpu::embedding_backward(id, dy->data(), dtable.data(), n, rows, dim);
    }
    return;
  }
  if (type == "linear") {
    const int64_t in = attr_i("in_features"), out_f = attr_i("out_features");
    const bool has_bias = op.attrs.value("bias", false);
    const auto layout = op.attrs.value("weight_layout", std::string("out_in")) == "in_out"
                            ? cpu::WeightLayout::in_out
                            : cpu::WeightLayout::out_in;
    const int x_t = op.inputs[0], y_t = op.outputs[0];
    const int64_t n = numel(x_t) / in;
    F32View x = value(x_t, false);
    F32View wv = param_view(op.params[0], false);
    if (!backward) {
      std::optional<F32View> bv;
      if (has_bias) bv.emplace(param_view(op.params[1], false));
      F32View y = value(y_t, true);
      cpu::linear_forward(x.data(), wv.data(), bv ? bv->data() : nullptr, y.data(), n, in, out_f,
                          layout);
    } else {
      auto dy = grad(y_t);
      if (!dy) throw missing("the gradient of " + g_.tensors[static_cast<size_t>(y_t)].name);
      auto dx = grad(x_t);
      F32View dw = param_view(op.params[0], true);
      std::optional<F32View> db;
      if (has_bias) db.emplace(param_view(op.params[1], true));
      cpu::linear_backward(x.data(), wv.data(), dy->data(), dx ? dx->data() : nullptr, dw.data(),
                           db ? db->data() : nullptr, n, in, out_f, layout);
    }
    return;
  }
  if (type == "layernorm" || type == "rmsnorm") {
    const bool ln = type == "layernorm";
    const int x_t = op.inputs[0];
    const int64_t c = last_dim(x_t), n = numel(x_t) / c;
    const double eps = attr_d("eps", 1e-5);
    F32View x = value(x_t, false);
    F32View wv = param_view(op.params[0], false);
    if (!backward) {
      F32View y = value(op.outputs[0], true);
      if (ln) {
        F32View bv = param_view(op.params[1], false);
        F32View mean = value(op.outputs[1], true);
        F32View rstd = value(op.outputs[2], true);
        cpu::layernorm_forward(x.data(), wv.data(), bv.data(), y.data(), mean.data(), rstd.data(),
                               n, c, eps);
      } else {
        F32View rstd = value(op.outputs[1], true);
        cpu::rmsnorm_forward(x.data(), wv.data(), y.data(), rstd.data(), n, c, eps);
      }
    } else {
      auto dy = grad(op.outputs[0]);
      if (!dy) throw missing("the gradient of the output");
      auto dx = grad(x_t);
      if (!dx) throw missing("the gradient of the input");
      F32View dw = param_view(op.params[0], true);
      if (ln) {
        F32View db = param_view(op.params[1], true);
        F32View mean = value(op.outputs[1], false);
        F32View rstd = value(op.outputs[2], false);
        cpu::layernorm_backward(x.data(), wv.data(), mean.data(), rstd.data(), dy->data(),
                                dx->data(), dw.data(), db.data(), n, c);
      } else {
        F32View rstd = value(op.outputs[1], false);
        cpu::rmsnorm_backward(x.data(), wv.data(), rstd.data(), dy->data(), dx->data(), dw.data(),
                              n, c);
      }
    }
    return;
  }
  if (type == "attention") {
    if (op.attrs.contains("sliding_window") || op.attrs.contains("rope_scaling"))
      throw ExecError("op '" + op.name +
                      "': the CPU engine has no sliding-window attention or RoPE scaling");
    cpu::AttentionShape s;
    s.batch = w_.batch;
    s.seq = w_.seq;
    s.n_head = attr_i("n_head");
    s.n_kv_head = attr_i("n_kv_head");
    s.head_dim = attr_i("head_dim");
    s.scale = attr_d("scale", 1.0 / std::sqrt(static_cast<double>(s.head_dim)));
    s.rope = op.attrs.value("rope", false);
    s.rope_theta = attr_d("rope_theta", 10000.0);
    const int64_t hd = s.n_head * s.head_dim, kvd = s.n_kv_head * s.head_dim;
    const bool packed = op.inputs.size() == 1;
    std::vector<F32View> in;
    for (int t : op.inputs) in.push_back(value(t, false));
    cpu::QkvView qkv{};
    if (packed) {
      qkv = {in[0].data(), in[0].data() + hd, in[0].data() + 2 * hd, 3 * hd, 3 * hd};
    } else {
      qkv = {in[0].data(), in[1].data(), in[2].data(), hd, kvd};
    }
    if (!backward) {
      F32View out = value(op.outputs[0], true);
      F32View lse = value(op.outputs[1], true);
      cpu::attention_forward(s, qkv, out.data(), lse.data());
    } else {
      F32View out = value(op.outputs[0], false);
      F32View lse = value(op.outputs[1], false);
      auto dout = grad(op.outputs[0]);
      if (!dout) throw missing("the gradient of the output");
      std::vector<F32View> gin;
      for (int t : op.inputs) {
        auto gv = grad(t);
        if (!gv) throw missing("the gradient of " + g_.tensors[static_cast<size_t>(t)].name);
        gin.push_back(std::move(*gv));
      }
      cpu::QkvGrad gq{};
      if (packed)
        gq = {gin[0].data(), gin[0].data() + hd, gin[0].data() + 2 * hd, 3 * hd, 3 * hd};
      else
        gq = {gin[0].data(), gin[1].data(), gin[2].data(), hd, kvd};
      cpu::attention_backward(s, qkv, out.data(), lse.data(), dout->data(), gq);
    }
    return;
  }
  if (type == "gelu" || type == "relu") {
    const int x_t = op.inputs[0], y_t = op.outputs[0];
    const int64_t n = numel(x_t);
    const bool tanh_form = op.attrs.value("approximate", std::string("tanh")) != "none";
    if (!backward) {
      F32View x = value(x_t, false);
      F32View y = value(y_t, true);
      if (type == "gelu")
        cpu::gelu_forward(x.data(), y.data(), n, tanh_form);
      else
        cpu::relu_forward(x.data(), y.data(), n);
    } else {
      auto dy = grad(y_t);
      auto dx = grad(x_t);
      if (!dy || !dx) throw missing("a gradient");
      if (type == "gelu") {
        F32View x = value(x_t, false);
        cpu::gelu_backward(x.data(), dy->data(), dx->data(), n, tanh_form);
      } else {
        F32View y = value(y_t, false);
        cpu::relu_backward(y.data(), dy->data(), dx->data(), n);
      }
    }
    return;
  }
  if (type == "swiglu") {
    const int64_t n = numel(op.outputs[0]);
    F32View gate = value(op.inputs[0], false);
    F32View up = value(op.inputs[1], false);
    if (!backward) {
      F32View y = value(op.outputs[0], true);
      cpu::swiglu_forward(gate.data(), up.data(), y.data(), n);
    } else {
      auto dy = grad(op.outputs[0]);
      auto dg = grad(op.inputs[0]);
      auto du = grad(op.inputs[1]);
      if (!dy || !dg || !du) throw missing("a gradient");
      cpu::swiglu_backward(gate.data(), up.data(), dy->data(), dg->data(), du->data(), n);
    }
    return;
  }
  if (type == "residual") {
    const int a_t = op.inputs[0], b_t = op.inputs[1];
    const int64_t n = numel(op.outputs[0]), nb = numel(b_t);
    if (numel(a_t) != n)
      throw ExecError("op '" + op.name + "': the first operand must be the full-size one");
    if (!backward) {
      F32View a = value(a_t, false);
      F32View b = value(b_t, false);
      F32View y = value(op.outputs[0], true);
      cpu::residual_forward(a.data(), b.data(), y.data(), n, nb);
    } else {
      auto dy = grad(op.outputs[0]);
      auto da = grad(a_t);
      auto db = grad(b_t);
      if (!dy || !da || !db) throw missing("a gradient");
      cpu::residual_backward(dy->data(), da->data(), db->data(), n, nb);
    }
    return;
  }
  if (type == "cross_entropy") {
    const int logits_t = op.inputs[0], labels_t = op.inputs[1];
    const int64_t v = attr_i("classes"), n = numel(logits_t) / v;
    const int64_t* labels = ids(labels_t);
    if (!backward) {
      F32View logits = value(logits_t, false);
      F32View logp = value(op.outputs[1], true);
      const double loss = cpu::cross_entropy_forward(logits.data(), labels, logp.data(), n, v);
      F32View out = value(op.outputs[0], true);
      out.data()[0] = static_cast<float>(loss);
      if (sop.kind == plan::OpKind::forward) micro_loss_sum_ += loss;
    } else {
      F32View logp = value(op.outputs[1], false);
      auto dl = grad(logits_t);
      if (!dl) throw missing("the gradient of the logits");
      cpu::cross_entropy_backward(logp.data(), labels, dloss_, dl->data(), n, v);
    }
    return;
  }
  throw ExecError("op '" + op.name + "': the CPU engine has no op type '" + type + "'");
}

}  // namespace shardscope::engine::exec
