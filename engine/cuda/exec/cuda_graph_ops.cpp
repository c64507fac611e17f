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

#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cpu/optim.h"
#include "engine/cuda/check.h"
#include "engine/cuda/exec/cuda_rank_executor.h"
#include "engine/exec/graph_operands.h"
#include "plan/sdpa.h"

namespace shardscope::engine::cuda {

using exec::ExecError;
using exec::Operand;

namespace {
constexpr size_t kAlign = 256;
size_t align_up(size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}
// A refusal of the op's arguments (alignment, dtypes) as the op's ExecError.
template <typename F>
void as_exec_error(const plan::Op& op, F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    throw ExecError("op '" + op.name + "': " + e.what());
  }
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
  // The stream workspace past what is carved: a cuDNN graph's (sized by
  // CudnnAttention::prepare at start-up, checked by the op).
  auto rest_ws = [&]() -> Workspace { return op_ws(stream_ws.bytes - carved); };
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

  if (is_moe_op(op.type)) return moe_graph_op(index, sop, ptrs, s);  // cuda_moe_ops.cpp
  switch (op.type) {
    case plan::OpType::embedding: {
      const int64_t rows = o.attr_i(op.attrs.num_embeddings, "num_embeddings"),
                    dim = o.attr_i(op.attrs.embedding_dim, "embedding_dim");
      const int out = op.outputs[0];
      const int64_t n = o.numel(out) / dim;
      const int64_t* id = op.inputs.empty() ? nullptr : ids(op.inputs[0]);
      // Positions from row `offset` on (OPT: 2): the table from that row, as the CPU engine.
      const int64_t offset = op.attrs.position_offset.value_or(0);
      if (offset < 0 || offset >= rows || (!op.inputs.empty() && offset != 0))
        throw ExecError("op '" + op.name + "': position_offset " + std::to_string(offset) +
                        " is not a row of a position table of " + std::to_string(rows));
      const int64_t padding_idx = op.attrs.padding_idx.value_or(-1);
      if (!backward) {
        const Operand table = o.param(op.params[0], false);
        const Operand y = o.value(out, true);
        if (sizing) return 0;
        embedding_forward(s, id, dev(table).at(offset * dim), dev(y), n, rows - offset, dim,
                          op.inputs.empty() ? nullptr : flags_ + index);
        return 0;
      }
      const Operand dy = need_grad(out);
      const Operand dtable = o.param(op.params[0], true);
      const size_t bytes = embedding_backward_workspace_bytes(n, rows - offset, dim);
      if (sizing) return bytes;
      embedding_backward(s, id, dev(dy), dev(dtable).at(offset * dim), n, rows - offset, dim,
                         op_ws(bytes), padding_idx);
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
      // rmsnorm's dim may be a divisor of the last dim (one row per head).
      const int64_t c = ln ? o.last_dim(x_t) : op.attrs.dim.value_or(o.last_dim(x_t));
      if (c < 1 || o.last_dim(x_t) % c != 0)
        throw ExecError("op '" + op.name + "': dim " + std::to_string(c) +
                        " does not divide the last dim " + std::to_string(o.last_dim(x_t)));
      const int64_t n = o.numel(x_t) / c;
      const double eps = op.attrs.eps.value_or(1e-5);
      const double offset = op.attrs.weight_offset.value_or(0.0);  // RMSNorm's (offset + w)
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
          rmsnorm_forward(s, dev(x), dev(w), dev(y), rstd, n, c, eps, offset);
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
        rmsnorm_backward(s, dev(x), dev(w), rstd, dev(dy), dev(*dx), dev(dw), n, c, op_ws(bytes),
                         offset);
      }
      return 0;
    }
    case plan::OpType::attention: {
      // The CPU engine's layouts (engine/exec/exec_graph_ops.cpp, the
      // attention case), which this case mirrors operand for operand.
      const AttentionShape shape = exec::attention_shape(o, s_.workload, "CUDA");
      const int64_t hd = shape.n_head * shape.head_dim, kvd = shape.n_kv_head * shape.head_dim;
      const bool packed = op.inputs.size() == 1;
      // Packed [.., q: H*D | k: Hkv*D | v: Hkv*D] (GPT-2, Phi-3's grouped KV
      // heads), or per head [.., H, 3, D] (GPT-NeoX, Hkv = H): k and v D and
      // 2*D after q, heads 3*D apart.
      const bool per_head = op.attrs.qkv_per_head.value_or(false);
      if (per_head && !packed)
        throw ExecError("op '" + op.name + "': qkv_per_head needs one packed qkv input");
      if (per_head && shape.n_kv_head != shape.n_head)
        throw ExecError("op '" + op.name + "': qkv_per_head needs n_kv_head == n_head");
      const int64_t head_stride = per_head ? 3 * shape.head_dim : 0;
      const int64_t row = hd + 2 * kvd;
      const int64_t k_off = per_head ? shape.head_dim : hd,
                    v_off = per_head ? 2 * shape.head_dim : hd + kvd;
      // k and v copied to H heads (plan/sdpa.h SdpaCall::kv_copied) live in
      // the op's kernel_saved buffer ([B, T, H*D] k, then v): forward writes
      // each row there as H / Hkv copies of its Hkv*D values, and, for a
      // packed input with RoPE, q (unrotated) into the q_roped output;
      // backward reads them back instead of the inputs.
      const bool repeated = plan::sdpa_call(op, sop.dtype, s_.workload.seq).kv_copied;
      const bool q_in_roped = repeated && packed && op.attrs.rope.value_or(false);
      if (q_in_roped && (per_head || op.outputs.size() < 4))
        throw ExecError("op '" + op.name + "': repeated k and v need a q_roped output");
      const int64_t rows = s_.workload.batch * s_.workload.seq;
      const bool use_cudnn = opts_.attention_kernel == AttentionKernel::cudnn;
      if (use_cudnn && per_head)
        throw ExecError("op '" + op.name +
                        "': the cudnn attention kernel does not read GPT-NeoX's per-head qkv "
                        "layout (qkv_per_head; use --attention-kernel simt or tensor-core)");
      std::vector<DevPtr> in;
      if (!backward || !repeated) {
        for (int t : op.inputs) in.push_back(dev(o.value(t, false)));
      } else {
        in.push_back(dev(o.value(q_in_roped ? op.outputs[2] : op.inputs[0], false)));
      }
      const DevPtr kv_copies = repeated ? dev(o.kernel_saved(2 * rows * hd)) : DevPtr{};
      if (repeated && kv_copies.dt != in.at(0).dt)
        throw ExecError("op '" + op.name + "': the copies of k and v are " +
                        plan::dtype_name(kv_copies.dt) + ", q is " + plan::dtype_name(in[0].dt));
      // The kernel family's refusals at start-up sizing, before any step.
      if (sizing) {
        try {
          check_attention_kernel("attention", opts_.attention_kernel, in.at(0).dt, shape.head_dim);
        } catch (const std::invalid_argument& e) {
          throw ExecError("op '" + op.name + "': " + e.what());
        }
      }
      // cuDNN: this op's graph, built and cached while sizing (never in a
      // step); its workspace (and the backward's gradient scratch) is carved
      // from the stream workspace like every op's.
      size_t cudnn_bytes = 0;
      CudnnAttention* cudnn = nullptr;
      if (use_cudnn) {
        cudnn = cudnn_[static_cast<size_t>(sop.stream)].get();
        if (!cudnn) throw ExecError("op '" + op.name + "': no cuDNN handle on its stream");
        try {
          // The strides qkv gets below, in this direction.
          const int64_t q_stride = backward && repeated ? (packed && !q_in_roped ? row : hd)
                                   : packed             ? row
                                                        : hd;
          const int64_t kv_stride = backward && repeated ? hd : packed ? row : kvd;
          const CudnnAttentionKey key =
              cudnn_attention_key("attention", shape, in.at(0).dt, q_stride, kv_stride,
                                  backward ? CudnnDirection::backward : CudnnDirection::forward,
                                  cudnn->deterministic_backward());
          cudnn_bytes = sizing ? cudnn->prepare(key) : 0;
        } catch (const std::invalid_argument& e) {
          throw ExecError("op '" + op.name + "': " + e.what());
        }
      }
      DevQkv qkv;  // (no pointers to offset while sizing)
      if (!sizing) {
        if (backward && repeated) {
          // q: the q_roped copy, q's own tensor, or (packed without RoPE) the packed input.
          const int64_t q_stride = packed && !q_in_roped ? row : hd;
          qkv = {in[0], kv_copies, kv_copies.at(rows * hd), q_stride, hd, 0};
        } else if (packed) {
          qkv = {in[0], in[0].at(k_off), in[0].at(v_off), row, row, head_stride};
        } else {
          qkv = {in.at(0), in.at(1), in.at(2), hd, kvd, 0};
        }
      }
      if (!backward) {
        const Operand out = o.value(op.outputs[0], true);
        float* lse = stat_out(o.value(op.outputs[1], true));
        const Operand q_copy = q_in_roped ? o.value(op.outputs[2], true) : Operand{};
        if (sizing) return carved + cudnn_bytes;
        if (use_cudnn)
          as_exec_error(op, [&] { cudnn->forward(s, shape, qkv, dev(out), lse, rest_ws()); });
        else
          attention_forward(s, shape, qkv, dev(out), lse, opts_.attention_kernel);
        flush_stats();
        // Strided device-to-device row copies: `width` elements of each of
        // `rows` rows, from rows `src_stride` apart to rows `dst_stride` apart.
        const auto copy_rows = [&](void* dst, int64_t dst_stride, const void* src,
                                   int64_t src_stride, int64_t width) {
          const auto eb = static_cast<size_t>(plan::dtype_bytes(in[0].dt));
          SS_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_stride) * eb, src,
                                          static_cast<size_t>(src_stride) * eb,
                                          static_cast<size_t>(width) * eb,
                                          static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, s));
        };
        if (repeated) {
          const DevPtr kc = kv_copies, vc = kv_copies.at(rows * hd);
          for (int64_t c = 0; c < hd; c += kvd) {
            copy_rows(kc.at(c).ptr, hd, qkv.k.ptr, qkv.kv_stride, kvd);
            copy_rows(vc.at(c).ptr, hd, qkv.v.ptr, qkv.kv_stride, kvd);
          }
        }
        if (q_in_roped) copy_rows(dev(q_copy).ptr, hd, qkv.q.ptr, qkv.q_stride, hd);
        return 0;
      }
      const Operand out = o.value(op.outputs[0], false);
      const float* lse = stat_in(o.value(op.outputs[1], false));
      const Operand dout = need_grad(op.outputs[0]);
      std::vector<DevPtr> gin;
      for (int t : op.inputs) gin.push_back(dev(need_grad(t)));
      const size_t bytes = use_cudnn ? cudnn_bytes : attention_backward_workspace_bytes(shape);
      if (sizing) return carved + bytes;
      DevQkvGrad grad;
      if (packed)
        grad = {gin[0], gin[0].at(k_off), gin[0].at(v_off), row, row, head_stride};
      else
        grad = {gin.at(0), gin.at(1), gin.at(2), hd, kvd, 0};
      if (use_cudnn)
        as_exec_error(
            op, [&] { cudnn->backward(s, shape, qkv, dev(out), lse, dev(dout), grad, rest_ws()); });
      else
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
      const std::string act = op.attrs.activation.value_or("silu");
      cpu::GateActivation ga = cpu::GateActivation::silu;
      if (act == "gelu")
        ga = cpu::GateActivation::gelu;
      else if (act == "gelu_tanh")
        ga = cpu::GateActivation::gelu_tanh;
      else if (act != "silu")
        throw ExecError("op '" + op.name + "': the CUDA engine has no gated activation '" + act +
                        "' (silu, gelu, gelu_tanh)");
      if (op.attrs.packed.value_or(false) || ga != cpu::GateActivation::silu) {
        // exec::run_gated's operands: packed, one [rows, 2F] input, gate =
        // columns [0, F), up = [F, 2F); unpacked, gate and up each one dense
        // row of rows * F.
        const bool packed = op.attrs.packed.value_or(false);
        const int y_t = op.outputs[0];
        const int64_t width = o.last_dim(y_t), rows = o.numel(y_t) / width;
        if (packed ? op.inputs.size() != 1 || o.last_dim(op.inputs[0]) != 2 * width
                   : op.inputs.size() != 2)
          throw ExecError("op '" + op.name + "': a packed gated MLP reads one [.., 2F] input, " +
                          "an unpacked one gate and up");
        const int64_t stride = packed ? 2 * width : rows * width;
        const int64_t r = packed ? rows : 1, w = packed ? width : rows * width;
        std::vector<Operand> in;
        for (int t : op.inputs) in.push_back(o.value(t, false));
        if (!backward) {
          const Operand y = o.value(y_t, true);
          if (sizing) return 0;
          const DevPtr gate = dev(in[0]);
          gated_forward(s, gate, packed ? gate.at(width) : dev(in[1]), dev(y), r, w, stride, ga);
          return 0;
        }
        const Operand dy = need_grad(y_t);
        std::vector<Operand> gin;
        for (int t : op.inputs) gin.push_back(need_grad(t));
        if (sizing) return 0;
        const DevPtr gate = dev(in[0]), dgate = dev(gin[0]);
        gated_backward(s, gate, packed ? gate.at(width) : dev(in[1]), dev(dy), dgate,
                       packed ? dgate.at(width) : dev(gin[1]), r, w, stride, ga);
        return 0;
      }
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
    case plan::OpType::scale: {
      if (!op.attrs.scale) throw o.missing("attribute scale");
      const int x_t = op.inputs.at(0), y_t = op.outputs.at(0);
      const int64_t n = o.numel(x_t);
      // torch.tensor(c, dtype=x.dtype): the constant is rounded to the
      // activation dtype (x's in forward; its gradient's in backward), as
      // exec::run_scale_softcap does.
      auto rounded = [&](plan::DType dt) {
        const auto c = static_cast<float>(*op.attrs.scale);
        if (dt == plan::DType::bf16) return cpu::round_to_bf16(c);
        if (dt == plan::DType::f16) return cpu::round_to_fp16(c);
        return c;
      };
      if (!backward) {
        const Operand x = o.value(x_t, false);
        const Operand y = o.value(y_t, true);
        if (sizing) return 0;
        scale_forward(s, dev(x), dev(y), n, rounded(x.dtype));
        return 0;
      }
      const Operand dx = need_grad(x_t);
      const Operand dy = need_grad(y_t);
      if (sizing) return 0;
      scale_backward(s, dev(dy), dev(dx), n, rounded(dx.dtype));
      return 0;
    }
    case plan::OpType::softcap: {
      if (!op.attrs.softcap) throw o.missing("attribute softcap");
      const auto cap = static_cast<float>(*op.attrs.softcap);
      const int x_t = op.inputs.at(0), y_t = op.outputs.at(0);
      const int64_t n = o.numel(x_t);
      if (!backward) {
        const Operand x = o.value(x_t, false);
        const Operand y = o.value(y_t, true);
        const Operand th = o.value(op.outputs.at(1), true);  // tanh(x / cap), for backward
        if (sizing) return 0;
        softcap_forward(s, dev(x), dev(y), dev(th), n, cap);
        return 0;
      }
      const Operand th = o.value(op.outputs.at(1), false);
      const Operand dy = need_grad(y_t);
      const Operand dx = need_grad(x_t);
      if (sizing) return 0;
      softcap_backward(s, dev(th), dev(dy), dev(dx), n);
      return 0;
    }
    case plan::OpType::rope:
    case plan::OpType::moe_router:  // the MoE ops are handed to moe_graph_op above
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
