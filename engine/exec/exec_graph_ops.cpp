// Forward, backward and recompute of graph ops (engine/cpu/ops.h): which
// buffer holds each operand follows from the op's buffer list
// (engine/exec/graph_operands.h, shared with the CUDA engine); 16-bit
// buffers are used through fp32 views (f32_view.h).
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "engine/cpu/ops.h"
#include "engine/exec/exec_hf_ops.h"
#include "engine/exec/exec_moe_ops.h"
#include "engine/exec/f32_view.h"
#include "engine/exec/graph_operands.h"
#include "engine/exec/rank_executor.h"
#include "plan/sdpa.h"

namespace shardscope::engine::exec {

void RankExecutor::run_graph_op(const Task& task, const plan::ScheduleOp& sop) {
  const GraphOperands o(g_, up_, layouts_, s_, sop);
  const plan::Op& op = o.op();
  const bool backward = o.backward();

  auto view = [&](const Operand& x, bool read, bool write) {
    return F32View(operand_base(task.ptrs, x), x.dtype, x.offset, x.numel, read, write);
  };
  // fp32 view of tensor t's value (read) or of a new output (write).
  auto value = [&](int t, bool output) { return view(o.value(t, output), !output, output); };
  auto ids = [&](int t) -> const int64_t* {
    return static_cast<const int64_t*>(task.ptrs[static_cast<size_t>(o.ids(t))]);
  };
  // Gradient of tensor t (accumulated into); nullopt when the plan has none.
  auto grad = [&](int t) -> std::optional<F32View> {
    const std::optional<Operand> x = o.grad(t);
    if (!x) return std::nullopt;
    return view(*x, true, true);
  };
  auto param_view = [&](int p, bool gradient) {
    return view(o.param(p, gradient), true, gradient);
  };
  auto numel = [&](int t) { return o.numel(t); };
  auto missing = [&](const std::string& what) { return o.missing(what); };

  switch (op.type) {
    case plan::OpType::embedding: {
      const int64_t rows = o.attr_i(op.attrs.num_embeddings, "num_embeddings"),
                    dim = o.attr_i(op.attrs.embedding_dim, "embedding_dim");
      const int out = op.outputs[0];
      const int64_t n = numel(out) / dim;
      const int64_t* id = op.inputs.empty() ? nullptr : ids(op.inputs[0]);
      // Positions from row `offset` on (OPT: 2): the table from that row.
      const int64_t offset = op.attrs.position_offset.value_or(0);
      if (offset < 0 || offset >= rows || (id != nullptr && offset != 0))
        throw ExecError("op '" + op.name + "': position_offset " + std::to_string(offset) +
                        " is not a row of a position table of " + std::to_string(rows));
      const int64_t padding_idx = op.attrs.padding_idx.value_or(-1);
      if (!backward) {
        F32View table = param_view(op.params[0], false);
        F32View y = value(out, true);
        cpu::embedding_forward(id, table.data() + offset * dim, y.data(), n, rows - offset, dim);
      } else {
        auto dy = grad(out);
        if (!dy) throw missing("the gradient of " + o.tensor_name(out));
        F32View dtable = param_view(op.params[0], true);
        cpu::embedding_backward(id, dy->data(), dtable.data() + offset * dim, n, rows - offset, dim,
                                padding_idx);
      }
      return;
    }
    case plan::OpType::linear: {
      const int64_t in = o.attr_i(op.attrs.in_features, "in_features"),
                    out_f = o.attr_i(op.attrs.out_features, "out_features");
      const bool has_bias = op.attrs.bias.value_or(false);
      const auto layout = op.attrs.weight_layout.value_or("out_in") == "in_out"
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
        if (!dy) throw missing("the gradient of " + o.tensor_name(y_t));
        auto dx = grad(x_t);
        F32View dw = param_view(op.params[0], true);
        std::optional<F32View> db;
        if (has_bias) db.emplace(param_view(op.params[1], true));
        cpu::linear_backward(x.data(), wv.data(), dy->data(), dx ? dx->data() : nullptr, dw.data(),
                             db ? db->data() : nullptr, n, in, out_f, layout);
      }
      return;
    }
    case plan::OpType::layernorm:
    case plan::OpType::rmsnorm: {
      const bool ln = op.type == plan::OpType::layernorm;
      const int x_t = op.inputs[0];
      // rmsnorm's dim may be a divisor of the last dim (one row per head).
      const int64_t c = ln ? o.last_dim(x_t) : op.attrs.dim.value_or(o.last_dim(x_t));
      if (c < 1 || o.last_dim(x_t) % c != 0)
        throw ExecError("op '" + op.name + "': dim " + std::to_string(c) +
                        " does not divide the last dim " + std::to_string(o.last_dim(x_t)));
      const int64_t n = numel(x_t) / c;
      const double eps = op.attrs.eps.value_or(1e-5);
      const double offset = op.attrs.weight_offset.value_or(0.0);
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
          cpu::rmsnorm_forward(x.data(), wv.data(), y.data(), rstd.data(), n, c, eps, offset);
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
                                n, c, offset);
        }
      }
      return;
    }
    case plan::OpType::attention: {
      const cpu::AttentionShape s = attention_shape(o, w_, "CPU");
      const int64_t hd = s.n_head * s.head_dim, kvd = s.n_kv_head * s.head_dim;
      const bool packed = op.inputs.size() == 1;
      // Packed [.., 3, H, D] (GPT-2): q, k, v H*D apart; per head [.., H, 3, D]
      // (GPT-NeoX): D apart, heads 3*D apart.
      const bool per_head = op.attrs.qkv_per_head.value_or(false);
      if (per_head && !packed)
        throw ExecError("op '" + op.name + "': qkv_per_head needs one packed qkv input");
      if (per_head && s.n_kv_head != s.n_head)
        throw ExecError("op '" + op.name + "': qkv_per_head needs n_kv_head == n_head");
      const int64_t head_stride = per_head ? 3 * s.head_dim : 0;
      // Packed: [q: H*D | k: Hkv*D | v: Hkv*D] per row (GPT-2: Hkv = H; Phi-3),
      // or per head (GPT-NeoX, Hkv = H): k and v D and 2*D after q.
      const int64_t row = hd + 2 * kvd;
      const int64_t k_off = per_head ? s.head_dim : hd,
                    v_off = per_head ? 2 * s.head_dim : hd + kvd;
      // k and v copied to H heads (plan/sdpa.h SdpaCall::kv_copied): the
      // plan keeps them in the op's kernel_saved buffer ([B, T, H*D] k, then
      // v, then the mask, if any) instead of the KV-head graph tensors, and,
      // for a packed input with RoPE, q in the q_roped output instead of the
      // packed projection. Forward writes each row there as H / Hkv copies of
      // its Hkv*D values (kv head g stays at g*D of the first copy), before
      // RoPE, which the kernel applies itself, as it applies the window
      // itself (the mask bytes are not written); backward reads them back.
      const bool repeated = plan::sdpa_call(op, sop.dtype, w_.seq).kv_copied;
      const bool q_in_roped = repeated && packed && op.attrs.rope.value_or(false);
      if (q_in_roped && (per_head || op.outputs.size() < 4))
        throw ExecError("op '" + op.name + "': repeated k and v need a q_roped output");
      const int64_t rows = w_.batch * w_.seq;
      std::vector<F32View> in;
      if (!backward || !repeated) {
        for (int t : op.inputs) in.push_back(value(t, false));
      } else {
        in.push_back(value(q_in_roped ? op.outputs[2] : op.inputs[0], false));
      }
      std::optional<F32View> kv_copies;
      if (repeated) kv_copies.emplace(view(o.kernel_saved(2 * rows * hd), backward, !backward));
      cpu::QkvView qkv{};
      if (backward && repeated) {
        // q: the q_roped copy, q's own tensor, or (packed without RoPE) the packed input.
        const int64_t q_stride = packed && !q_in_roped ? row : hd;
        qkv = {in[0].data(), kv_copies->data(), kv_copies->data() + rows * hd, q_stride, hd, 0};
      } else if (packed) {
        qkv = {in[0].data(), in[0].data() + k_off, in[0].data() + v_off, row, row, head_stride};
      } else {
        qkv = {in[0].data(), in[1].data(), in[2].data(), hd, kvd, 0};
      }
      if (!backward) {
        F32View out = value(op.outputs[0], true);
        F32View lse = value(op.outputs[1], true);
        cpu::attention_forward(s, qkv, out.data(), lse.data());
        if (repeated) {
          float* kc = kv_copies->data();
          float* vc = kc + rows * hd;
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < hd; c += kvd) {
              std::memcpy(kc + r * hd + c, qkv.k + r * qkv.kv_stride,
                          static_cast<size_t>(kvd) * sizeof(float));
              std::memcpy(vc + r * hd + c, qkv.v + r * qkv.kv_stride,
                          static_cast<size_t>(kvd) * sizeof(float));
            }
        }
        if (q_in_roped) {
          F32View q = value(op.outputs[2], true);
          for (int64_t r = 0; r < rows; ++r)
            std::memcpy(q.data() + r * hd, qkv.q + r * qkv.q_stride,
                        static_cast<size_t>(hd) * sizeof(float));
        }
      } else {
        F32View out = value(op.outputs[0], false);
        F32View lse = value(op.outputs[1], false);
        auto dout = grad(op.outputs[0]);
        if (!dout) throw missing("the gradient of the output");
        std::vector<F32View> gin;
        for (int t : op.inputs) {
          auto gv = grad(t);
          if (!gv) throw missing("the gradient of " + o.tensor_name(t));
          gin.push_back(std::move(*gv));
        }
        cpu::QkvGrad gq{};
        if (packed)
          gq = {gin[0].data(), gin[0].data() + k_off, gin[0].data() + v_off, row, row, head_stride};
        else
          gq = {gin[0].data(), gin[1].data(), gin[2].data(), hd, kvd, 0};
        cpu::attention_backward(s, qkv, out.data(), lse.data(), dout->data(), gq);
      }
      return;
    }
    case plan::OpType::gelu:
    case plan::OpType::relu: {
      const bool gelu = op.type == plan::OpType::gelu;
      const int x_t = op.inputs[0], y_t = op.outputs[0];
      const int64_t n = numel(x_t);
      const bool tanh_form = op.attrs.approximate.value_or("tanh") != "none";
      if (!backward) {
        F32View x = value(x_t, false);
        F32View y = value(y_t, true);
        if (gelu)
          cpu::gelu_forward(x.data(), y.data(), n, tanh_form);
        else
          cpu::relu_forward(x.data(), y.data(), n);
      } else {
        auto dy = grad(y_t);
        auto dx = grad(x_t);
        if (!dy || !dx) throw missing("a gradient");
        if (gelu) {
          F32View x = value(x_t, false);
          cpu::gelu_backward(x.data(), dy->data(), dx->data(), n, tanh_form);
        } else {
          F32View y = value(y_t, false);
          cpu::relu_backward(y.data(), dy->data(), dx->data(), n);
        }
      }
      return;
    }
    case plan::OpType::swiglu: {
      const std::string act = op.attrs.activation.value_or("silu");
      cpu::GateActivation ga = cpu::GateActivation::silu;
      if (act == "gelu")
        ga = cpu::GateActivation::gelu;
      else if (act == "gelu_tanh")
        ga = cpu::GateActivation::gelu_tanh;
      else if (act != "silu")
        throw ExecError("op '" + op.name + "': the CPU engine has no gated activation '" + act +
                        "' (silu, gelu, gelu_tanh)");
      if (op.attrs.packed.value_or(false) || ga != cpu::GateActivation::silu) {
        run_gated(o, task.ptrs, ga);
        return;
      }
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
    case plan::OpType::residual: {
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
    case plan::OpType::cross_entropy: {
      const int logits_t = op.inputs[0], labels_t = op.inputs[1];
      const int64_t v = o.attr_i(op.attrs.classes, "classes"), n = numel(logits_t) / v;
      const int64_t valid = op.attrs.valid_classes.value_or(v);  // padded vocabulary: V of Vp
      const int64_t* labels = ids(labels_t);
      if (!backward) {
        F32View logits = value(logits_t, false);
        F32View logp = value(op.outputs[1], true);
        const double loss =
            cpu::cross_entropy_forward(logits.data(), labels, logp.data(), n, v, valid);
        F32View out = value(op.outputs[0], true);
        out.data()[0] = static_cast<float>(loss);
        if (sop.kind == plan::OpKind::forward) micro_loss_sum_ += loss;
      } else {
        F32View logp = value(op.outputs[1], false);
        auto dl = grad(logits_t);
        if (!dl) throw missing("the gradient of the logits");
        cpu::cross_entropy_backward(logp.data(), labels, dloss_, dl->data(), n, v, valid);
      }
      return;
    }
    case plan::OpType::scale:
    case plan::OpType::softcap:
      run_scale_softcap(o, task.ptrs);
      return;
    case plan::OpType::moe_router:
    case plan::OpType::moe_dispatch:
    case plan::OpType::moe_combine: {
      // A router's forward (not its recompute) records the tokens each expert got.
      std::vector<int64_t>* counts = nullptr;
      if (op.type == plan::OpType::moe_router && sop.kind == plan::OpKind::forward)
        counts = &expert_tokens_[router_ordinal_.at(static_cast<size_t>(sop.graph_op))];
      run_moe(o, task.ptrs, w_, counts);
      return;
    }
    case plan::OpType::sigmoid_gate:
      run_sigmoid_gate(o, task.ptrs);
      return;
    case plan::OpType::rope:
    case plan::OpType::aten:  // refused before ranks start (engine/run/aten_support.h)
      break;
  }
  throw ExecError("op '" + op.name + "': the CPU engine has no op type '" +
                  plan::op_type_name(op.type) + "'");
}

}  // namespace shardscope::engine::exec
