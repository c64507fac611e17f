// Forward, backward and recompute of graph ops on the GPU (engine/cuda/ops),
// with the CPU engine's operand conventions (engine/exec/graph_operands.h).
//
// One function both sizes and runs an op: with ptrs == nullptr it only
// returns the stream workspace the op needs (start-up sizing), so the shapes
// used to size a workspace are those used to launch. The workspace of the
// op's stream is carved as [statistics scratch][the op's own workspace]:
// normalisation statistics and attention log-sum-exps are fp32 in the CUDA
// ops, while the plan stores them in the compute dtype (the CPU engine rounds
// them there too); when that dtype is not fp32 they go through fp32 scratch
// and a cast, so values match the CPU engine's.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "engine/cuda/check.h"
#include "engine/cuda/exec/cuda_rank_executor.h"
#include "engine/exec/graph_operands.h"

namespace shardscope::engine::cuda {

using exec::ExecError;
using exec::Operand;

namespace {
constexpr size_t kAlign = 256;
size_t align_up(size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}
}  // namespace

size_t CudaRankExecutor::graph_op(int index, const plan::ScheduleOp& sop,
                                  const std::vector<void*>* ptrs, cudaStream_t s) {
  const exec::GraphOperands o(g_, up_, layouts_, s_, sop);
  const plan::Op& op = o.op();
  const bool backward = o.backward();
  const bool sizing = ptrs == nullptr;

  auto dev = [&](const Operand& x) -> DevPtr {
    if (sizing) return DevPtr{nullptr, x.dtype};
    return DevPtr{static_cast<char*>((*ptrs)[static_cast<size_t>(x.slot)]) +
                      x.offset * plan::dtype_bytes(x.dtype),
                  x.dtype};
  };
  auto ids = [&](int t) -> const int64_t* {
    const int slot = o.ids(t);
    return sizing ? nullptr : static_cast<const int64_t*>((*ptrs)[static_cast<size_t>(slot)]);
  };
  auto need_grad = [&](int t) -> Operand {
    auto gv = o.grad(t);
    if (!gv) throw o.missing("the gradient of " + o.tensor_name(t));
    return *gv;
  };
  auto opt_grad = [&](int t) -> DevPtr {
    auto gv = o.grad(t);
    return gv ? dev(*gv) : DevPtr{nullptr, plan::DType::f32};
  };

  // Workspace carving.
  const Workspace stream_ws = sizing ? Workspace{} : workspaces_[static_cast<size_t>(sop.stream)];
  size_t carved = 0;
  auto carve = [&](int64_t floats) -> float* {
    const size_t bytes = align_up(static_cast<size_t>(floats) * sizeof(float));
    if (!sizing && carved + bytes > stream_ws.bytes)
      throw ExecError("op '" + op.name + "': stream workspace of " +
                      std::to_string(stream_ws.bytes) + " bytes has no room for its statistics");
    float* p =
        sizing ? nullptr : reinterpret_cast<float*>(static_cast<char*>(stream_ws.ptr) + carved);
    carved += bytes;
    return p;
  };
  auto op_ws = [&](size_t bytes) -> Workspace {
    if (sizing) return Workspace{};
    if (carved + bytes > stream_ws.bytes)
      throw ExecError("op '" + op.name + "': stream workspace of " +
                      std::to_string(stream_ws.bytes) + " bytes is smaller than the " +
                      std::to_string(carved + bytes) + " it needs (start-up sizing missed it)");
    return Workspace{bytes == 0 ? nullptr : static_cast<char*>(stream_ws.ptr) + carved, bytes};
  };
  // fp32 statistics: written by a forward (cast into the buffer afterwards) or
  // read by a backward (cast from the buffer first).
  std::vector<std::pair<float*, Operand>> stats_out;
  auto stat_out = [&](const Operand& x) -> float* {
    if (x.dtype == plan::DType::f32) return sizing ? nullptr : static_cast<float*>(dev(x).ptr);
    float* scratch = carve(x.numel);
    stats_out.emplace_back(scratch, x);
    return scratch;
  };
  auto stat_in = [&](const Operand& x) -> const float* {
    if (x.dtype == plan::DType::f32) return sizing ? nullptr : static_cast<float*>(dev(x).ptr);
    float* scratch = carve(x.numel);
    if (!sizing) cast(s, dev(x), DevPtr{scratch, plan::DType::f32}, x.numel);
    return scratch;
  };
  auto flush_stats = [&] {
    for (const auto& [scratch, x] : stats_out)
      cast(s, ConstDevPtr{scratch, plan::DType::f32}, dev(x), x.numel);
  };
  auto blas = [&]() -> Blas& {
    Blas* b = blas_[static_cast<size_t>(sop.stream)].get();
    if (!b) throw ExecError("op '" + op.name + "': no GEMM handle on its stream");
    return *b;
  };

  switch (op.type) {
    case plan::OpType::embedding: {
      const int64_t rows = o.attr_i(op.attrs.num_embeddings, "num_embeddings"),
                    dim = o.attr_i(op.attrs.embedding_dim, "embedding_dim");
      const int out = op.outputs[0];
      const int64_t n = o.numel(out) / dim;
      const int64_t* id = op.inputs.empty() ? nullptr : ids(op.inputs[0]);
      if (!backward) {
        const Operand table = o.param(op.params[0], false);
        const Operand y = o.value(out, true);
        if (sizing) return 0;
        embedding_forward(s, id, dev(table), dev(y), n, rows, dim,
                          op.inputs.empty() ? nullptr : flags_ + index);
        return 0;
      }
      const Operand dy = need_grad(out);
      const Operand dtable = o.param(op.params[0], true);
      const size_t bytes = embedding_backward_workspace_bytes(n, rows, dim);
      if (sizing) return bytes;
      embedding_backward(s, id, dev(dy), dev(dtable), n, rows, dim, op_ws(bytes));
      return 0;
    }
    case plan::OpType::linear: {
      const int64_t in = o.attr_i(op.attrs.in_features, "in_features"),
                    out_f = o.attr_i(op.attrs.out_features, "out_features");
      const bool has_bias = op.attrs.bias.value_or(false);
      const auto layout = op.attrs.weight_layout.value_or("out_in") == "in_out"
                              ? WeightLayout::in_out
                              : WeightLayout::out_in;
      const int x_t = op.inputs[0], y_t = op.outputs[0];
      const int64_t n = o.numel(x_t) / in;
      const Operand x = o.value(x_t, false);
      const Operand w = o.param(op.params[0], false);
      if (!backward) {
        const DevPtr bias = has_bias ? dev(o.param(op.params[1], false)) : DevPtr{};
        const Operand y = o.value(y_t, true);
        if (sizing) return 0;
        linear_forward(blas(), s, dev(x), dev(w), bias, dev(y), n, in, out_f, layout);
        return 0;
      }
      const Operand dy = need_grad(y_t);
      const DevPtr dx = opt_grad(x_t);
      const Operand dw = o.param(op.params[0], true);
      const DevPtr db = has_bias ? dev(o.param(op.params[1], true)) : DevPtr{};
      const size_t bytes = linear_backward_workspace_bytes(n, in, out_f);
      if (sizing) return bytes;
      linear_backward(blas(), s, dev(x), dev(w), dev(dy), dx, dev(dw), db, n, in, out_f, layout,
                      op_ws(bytes));
      return 0;
    }
    case plan::OpType::layernorm:
    case plan::OpType::rmsnorm: {
      const bool ln = op.type == plan::OpType::layernorm;
      const int x_t = op.inputs[0];
      const int64_t c = o.last_dim(x_t), n = o.numel(x_t) / c;
      const double eps = op.attrs.eps.value_or(1e-5);
      const Operand x = o.value(x_t, false);
      const Operand w = o.param(op.params[0], false);
      if (!backward) {
        const Operand y = o.value(op.outputs[0], true);
        if (ln) {
          const Operand b = o.param(op.params[1], false);
          float* mean = stat_out(o.value(op.outputs[1], true));
          float* rstd = stat_out(o.value(op.outputs[2], true));
          if (sizing) return carved;
          layernorm_forward(s, dev(x), dev(w), dev(b), dev(y), mean, rstd, n, c, eps);
        } else {
          float* rstd = stat_out(o.value(op.outputs[1], true));
          if (sizing) return carved;
          rmsnorm_forward(s, dev(x), dev(w), dev(y), rstd, n, c, eps);
        }
        flush_stats();
        return 0;
      }
      const Operand dy = need_grad(op.outputs[0]);
      auto dx = o.grad(x_t);
      if (!dx) throw o.missing("the gradient of the input");
      const Operand dw = o.param(op.params[0], true);
      if (ln) {
        const Operand db = o.param(op.params[1], true);
        const float* mean = stat_in(o.value(op.outputs[1], false));
        const float* rstd = stat_in(o.value(op.outputs[2], false));
        const size_t bytes = layernorm_backward_workspace_bytes(n, c);
        if (sizing) return carved + bytes;
        layernorm_backward(s, dev(x), dev(w), mean, rstd, dev(dy), dev(*dx), dev(dw), dev(db), n, c,
                           op_ws(bytes));
      } else {
        const float* rstd = stat_in(o.value(op.outputs[1], false));
        const size_t bytes = rmsnorm_backward_workspace_bytes(n, c);
        if (sizing) return carved + bytes;
        rmsnorm_backward(s, dev(x), dev(w), rstd, dev(dy), dev(*dx), dev(dw), n, c, op_ws(bytes));
      }
      return 0;
    }
    case plan::OpType::attention: {
      const AttentionShape shape = exec::attention_shape(o, s_.workload, "CUDA");
      const int64_t hd = shape.n_head * shape.head_dim, kvd = shape.n_kv_head * shape.head_dim;
      const bool packed = op.inputs.size() == 1;
      std::vector<DevPtr> in;
      for (int t : op.inputs) in.push_back(dev(o.value(t, false)));
      // The kernel family's refusals at start-up sizing, before any step.
      if (sizing) {
        try {
          check_attention_kernel("attention", opts_.attention_kernel, in.at(0).dt, shape.head_dim);
        } catch (const std::invalid_argument& e) {
          throw ExecError("op '" + op.name + "': " + e.what());
        }
      }
      DevQkv qkv;  // (no pointers to offset while sizing)
      if (!sizing && packed) qkv = {in[0], in[0].at(hd), in[0].at(2 * hd), 3 * hd, 3 * hd};
      if (!sizing && !packed) qkv = {in.at(0), in.at(1), in.at(2), hd, kvd};
      if (!backward) {
        const Operand out = o.value(op.outputs[0], true);
        float* lse = stat_out(o.value(op.outputs[1], true));
        if (sizing) return carved;
        attention_forward(s, shape, qkv, dev(out), lse, opts_.attention_kernel);
        flush_stats();
        return 0;
      }
      const Operand out = o.value(op.outputs[0], false);
      const float* lse = stat_in(o.value(op.outputs[1], false));
      const Operand dout = need_grad(op.outputs[0]);
      std::vector<DevPtr> gin;
      for (int t : op.inputs) gin.push_back(dev(need_grad(t)));
      const size_t bytes = attention_backward_workspace_bytes(shape);
      if (sizing) return carved + bytes;
      DevQkvGrad grad;
      if (packed)
        grad = {gin[0], gin[0].at(hd), gin[0].at(2 * hd), 3 * hd, 3 * hd};
      else
        grad = {gin.at(0), gin.at(1), gin.at(2), hd, kvd};
      attention_backward(s, shape, qkv, dev(out), lse, dev(dout), grad, op_ws(bytes),
                         opts_.attention_kernel);
      return 0;
    }
    case plan::OpType::gelu:
    case plan::OpType::relu: {
      const bool gelu = op.type == plan::OpType::gelu;
      const int x_t = op.inputs[0], y_t = op.outputs[0];
      const int64_t n = o.numel(x_t);
      const bool tanh_form = op.attrs.approximate.value_or("tanh") != "none";
      if (!backward) {
        const Operand x = o.value(x_t, false);
        const Operand y = o.value(y_t, true);
        if (sizing) return 0;
        if (gelu)
          gelu_forward(s, dev(x), dev(y), n, tanh_form);
        else
          relu_forward(s, dev(x), dev(y), n);
        return 0;
      }
      auto dy = o.grad(y_t);
      auto dx = o.grad(x_t);
      if (!dy || !dx) throw o.missing("a gradient");
      if (gelu) {
        const Operand x = o.value(x_t, false);
        if (sizing) return 0;
        gelu_backward(s, dev(x), dev(*dy), dev(*dx), n, tanh_form);
      } else {
        const Operand y = o.value(y_t, false);
        if (sizing) return 0;
        relu_backward(s, dev(y), dev(*dy), dev(*dx), n);
      }
      return 0;
    }
    case plan::OpType::swiglu: {
      if (op.attrs.activation.value_or("silu") != "silu")
        throw ExecError("op '" + op.name +
                        "': the CUDA engine runs the SiLU-gated MLP only, not '" +
                        *op.attrs.activation + "'");
      const int64_t n = o.numel(op.outputs[0]);
      const Operand gate = o.value(op.inputs[0], false);
      const Operand up = o.value(op.inputs[1], false);
      if (!backward) {
        const Operand y = o.value(op.outputs[0], true);
        if (sizing) return 0;
        swiglu_forward(s, dev(gate), dev(up), dev(y), n);
        return 0;
      }
      auto dy = o.grad(op.outputs[0]);
      auto dg = o.grad(op.inputs[0]);
      auto du = o.grad(op.inputs[1]);
      if (!dy || !dg || !du) throw o.missing("a gradient");
      if (sizing) return 0;
      swiglu_backward(s, dev(gate), dev(up), dev(*dy), dev(*dg), dev(*du), n);
      return 0;
    }
    case plan::OpType::residual: {
      const int a_t = op.inputs[0], b_t = op.inputs[1];
      const int64_t n = o.numel(op.outputs[0]), nb = o.numel(b_t);
      if (o.numel(a_t) != n)
        throw ExecError("op '" + op.name + "': the first operand must be the full-size one");
      if (!backward) {
        const Operand a = o.value(a_t, false);
        const Operand b = o.value(b_t, false);
        const Operand y = o.value(op.outputs[0], true);
        if (sizing) return 0;
        residual_forward(s, dev(a), dev(b), dev(y), n, nb);
        return 0;
      }
      auto dy = o.grad(op.outputs[0]);
      auto da = o.grad(a_t);
      auto db = o.grad(b_t);
      if (!dy || !da || !db) throw o.missing("a gradient");
      const size_t bytes = residual_backward_workspace_bytes(n, nb);
      if (sizing) return bytes;
      residual_backward(s, dev(*dy), dev(*da), dev(*db), n, nb, op_ws(bytes));
      return 0;
    }
    case plan::OpType::cross_entropy: {
      const int logits_t = op.inputs[0], labels_t = op.inputs[1];
      const int64_t v = o.attr_i(op.attrs.classes, "classes"), n = o.numel(logits_t) / v;
      const int64_t valid = op.attrs.valid_classes.value_or(v);  // padded vocabulary: V of Vp
      const int64_t* labels = ids(labels_t);
      if (!backward) {
        const Operand logits = o.value(logits_t, false);
        const Operand logp = o.value(op.outputs[1], true);
        const Operand loss = o.value(op.outputs[0], true);
        const size_t bytes = cross_entropy_forward_workspace_bytes(n, v);
        if (sizing) return bytes;
        // This op's mean loss in the stream's scratch slot, then into the loss
        // tensor and (forward, not recompute) the step's sum.
        double* micro = &scalars_->ce_micro[sop.stream];
        SS_CUDA_CHECK(cudaMemsetAsync(micro, 0, sizeof(double), s));
        cross_entropy_forward(s, dev(logits), labels, dev(logp), n, v, micro, flags_ + index,
                              op_ws(bytes), valid);
        finish_cross_entropy(s, micro, dev(loss),
                             sop.kind == plan::OpKind::forward ? &scalars_->loss_sum : nullptr);
        return 0;
      }
      const Operand logp = o.value(op.outputs[1], false);
      auto dl = o.grad(logits_t);
      if (!dl) throw o.missing("the gradient of the logits");
      if (sizing) return 0;
      cross_entropy_backward(s, dev(logp), labels, dloss_, dev(*dl), n, v, valid);
      return 0;
    }
    case plan::OpType::rope:
    case plan::OpType::scale:    // refused on the host (engine/run/cuda_support.cpp)
    case plan::OpType::softcap:  // as well
    case plan::OpType::moe_router:
    case plan::OpType::moe_dispatch:
    case plan::OpType::moe_combine:
    case plan::OpType::sigmoid_gate:
    case plan::OpType::aten:  // refused on the host (engine/run/aten_support.h)
      break;
  }
  throw ExecError("op '" + op.name + "': the CUDA engine has no op type '" +
                  plan::op_type_name(op.type) + "'");
}

}  // namespace shardscope::engine::cuda
