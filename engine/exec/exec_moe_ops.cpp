#include "engine/exec/exec_moe_ops.h"

#include <optional>
#include <string>

#include "engine/cpu/ops.h"
#include "engine/exec/f32_view.h"
#include "engine/exec/operand_views.h"

namespace shardscope::engine::exec {

namespace {

// An i64 tensor's elements (expert indices, slots).
int64_t* i64_of(const GraphOperands& o, const std::vector<void*>& ptrs, int tensor, bool output) {
  const Operand x = o.value(tensor, output);
  if (x.dtype != plan::DType::i64)
    throw ExecError("op '" + o.op().name + "': tensor '" + o.tensor_name(tensor) +
                    "' is not i64 storage");
  return x.slot < 0 ? nullptr : static_cast<int64_t*>(operand_base(ptrs, x)) + x.offset;
}

}  // namespace

std::vector<int64_t> forced_routing_ends(int64_t seq, int64_t experts, int64_t k,
                                         const plan::TokenBalance* balance) {
  std::vector<int64_t> end(static_cast<size_t>(experts));  // cumulative slot counts
  int64_t total = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t n = plan::routed_tokens(seq, e, experts, k, balance);
    if (n > seq)
      throw ExecError("forced routing: expert " + std::to_string(e) + " would get " +
                      std::to_string(n) + " of " + std::to_string(seq) +
                      " tokens, a token twice (token_balance share above 1/top_k)");
    total += n;
    end[static_cast<size_t>(e)] = total;
  }
  if (total != seq * k) throw ExecError("forced routing: expert counts do not sum to T*k");
  return end;
}

void forced_routing(int64_t batch, int64_t seq, int64_t experts, int64_t k,
                    const plan::TokenBalance* balance, int64_t* indices) {
  const std::vector<int64_t> end = forced_routing_ends(seq, experts, k, balance);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t e = 0;
    for (int64_t s = 0; s < seq * k; ++s) {
      while (s >= end[static_cast<size_t>(e)]) ++e;
      const int64_t t = s % seq, j = s / seq;
      indices[(b * seq + t) * k + j] = e;
    }
  }
}

void run_moe(const GraphOperands& o, const std::vector<void*>& ptrs, const plan::Workload& w,
             std::vector<int64_t>* expert_tokens) {
  const plan::Op& op = o.op();
  const int64_t experts = o.attr_i(op.attrs.num_experts, "num_experts");
  const int64_t k = o.attr_i(op.attrs.top_k, "top_k");
  const int64_t tokens = w.batch * w.seq;
  switch (op.type) {
    case plan::OpType::moe_router: {
      const bool normalize = op.attrs.norm_topk_prob.value_or(false);
      const int logits_t = op.inputs.at(0), weights_t = op.outputs.at(0);
      const int indices_t = op.outputs.at(1), probs_t = op.outputs.at(2);
      if (!o.backward()) {
        F32View logits = view_of(ptrs, o.value(logits_t, false), true, false);
        F32View weights = view_of(ptrs, o.value(weights_t, true), false, true);
        F32View probs = view_of(ptrs, o.value(probs_t, true), false, true);
        int64_t* idx = i64_of(o, ptrs, indices_t, true);
        const bool topk = w.balance && w.balance->mode == plan::TokenBalance::Mode::all_tokens;
        if (!topk) forced_routing(w.batch, w.seq, experts, k, w.balance.get(), idx);
        cpu::moe_router_forward(logits.data(), probs.data(), idx, weights.data(), tokens, experts,
                                k, normalize, topk);
        if (expert_tokens) {
          expert_tokens->resize(static_cast<size_t>(experts), 0);
          for (int64_t i = 0; i < tokens * k; ++i) ++(*expert_tokens)[static_cast<size_t>(idx[i])];
        }
      } else {
        F32View probs = view_of(ptrs, o.value(probs_t, false), true, false);
        const int64_t* idx = i64_of(o, ptrs, indices_t, false);
        F32View dweights = grad_of(o, ptrs, weights_t);
        F32View dlogits = grad_of(o, ptrs, logits_t);
        cpu::moe_router_backward(probs.data(), idx, dweights.data(), dlogits.data(), tokens,
                                 experts, k, normalize);
      }
      return;
    }
    case plan::OpType::moe_dispatch: {
      const int x_t = op.inputs.at(0), xe_t = op.outputs.at(0), slots_t = op.outputs.at(1);
      const int64_t c = o.last_dim(x_t), rows = o.numel(slots_t);
      const int64_t expert = o.attr_i(op.attrs.expert, "expert");
      if (!o.backward()) {
        F32View x = view_of(ptrs, o.value(x_t, false), true, false);
        F32View xe = view_of(ptrs, o.value(xe_t, true), false, true);
        const int64_t* idx = i64_of(o, ptrs, op.inputs.at(1), false);
        const int64_t found =
            cpu::moe_dispatch_forward(x.data(), idx, xe.data(), i64_of(o, ptrs, slots_t, true),
                                      tokens, w.seq, c, k, expert, rows);
        const bool topk = w.balance && w.balance->mode == plan::TokenBalance::Mode::all_tokens;
        if (!topk && found != rows)
          throw ExecError("op '" + op.name + "': forced routing gave expert " +
                          std::to_string(expert) + " " + std::to_string(found) +
                          " rows, the plan " + std::to_string(rows));
      } else {
        F32View dxe = grad_of(o, ptrs, xe_t);
        F32View dx = grad_of(o, ptrs, x_t);
        cpu::moe_dispatch_backward(dxe.data(), i64_of(o, ptrs, slots_t, false), dx.data(), rows, c,
                                   k, tokens);
      }
      return;
    }
    case plan::OpType::moe_combine: {
      // inputs: E expert outputs, the weights, E slots.
      if (op.inputs.size() != static_cast<size_t>(2 * experts + 1))
        throw ExecError("op '" + op.name + "': expects 2 * num_experts + 1 inputs");
      const int weights_t = op.inputs[static_cast<size_t>(experts)], out_t = op.outputs.at(0);
      const int64_t c = o.last_dim(out_t);
      std::vector<F32View> y;
      y.reserve(static_cast<size_t>(experts));
      std::vector<const float*> y_ptr;
      std::vector<const int64_t*> slots;
      std::vector<int64_t> rows;
      for (int64_t e = 0; e < experts; ++e) {
        const int y_t = op.inputs[static_cast<size_t>(e)];
        y.push_back(view_of(ptrs, o.value(y_t, false), true, false));
        y_ptr.push_back(y.back().data());
        slots.push_back(i64_of(o, ptrs, op.inputs[static_cast<size_t>(experts + 1 + e)], false));
        rows.push_back(o.numel(y_t) / c);
      }
      F32View weights = view_of(ptrs, o.value(weights_t, false), true, false);
      if (!o.backward()) {
        F32View out = view_of(ptrs, o.value(out_t, true), false, true);
        // outputs 1..E: the weighted products each expert's index_add_ keeps.
        if (op.outputs.size() != static_cast<size_t>(experts + 1))
          throw ExecError("op '" + op.name + "': expects 1 + num_experts outputs");
        std::vector<F32View> weighted;
        weighted.reserve(static_cast<size_t>(experts));
        std::vector<float*> weighted_ptr;
        for (int64_t e = 0; e < experts; ++e) {
          weighted.push_back(
              view_of(ptrs, o.value(op.outputs[static_cast<size_t>(e + 1)], true), false, true));
          weighted_ptr.push_back(weighted.back().data());
        }
        cpu::moe_combine_forward(y_ptr.data(), slots.data(), rows.data(), experts, weights.data(),
                                 out.data(), tokens, c, k, weighted_ptr.data());
      } else {
        F32View dout = grad_of(o, ptrs, out_t);
        F32View dweights = grad_of(o, ptrs, weights_t);
        std::vector<F32View> dy;
        dy.reserve(static_cast<size_t>(experts));
        std::vector<float*> dy_ptr;
        for (int64_t e = 0; e < experts; ++e) {
          dy.push_back(grad_of(o, ptrs, op.inputs[static_cast<size_t>(e)]));
          dy_ptr.push_back(dy.back().data());
        }
        cpu::moe_combine_backward(y_ptr.data(), slots.data(), rows.data(), experts, weights.data(),
                                  dout.data(), dy_ptr.data(), dweights.data(), tokens, c, k);
      }
      return;
    }
    default:
      break;
  }
  throw ExecError("op '" + op.name + "': not a mixture-of-experts op");
}

void run_sigmoid_gate(const GraphOperands& o, const std::vector<void*>& ptrs) {
  const plan::Op& op = o.op();
  const int g_t = op.inputs.at(0), x_t = op.inputs.at(1);
  const int y_t = op.outputs.at(0), sig_t = op.outputs.at(1);
  const int64_t n = o.numel(g_t), c = o.last_dim(x_t);
  if (o.last_dim(g_t) != 1 || o.numel(x_t) != n * c)
    throw ExecError("op '" + op.name + "': expects a gate [.., 1] and x [.., C] of as many rows");
  F32View x = view_of(ptrs, o.value(x_t, false), true, false);
  if (!o.backward()) {
    F32View g = view_of(ptrs, o.value(g_t, false), true, false);
    F32View y = view_of(ptrs, o.value(y_t, true), false, true);
    F32View sig = view_of(ptrs, o.value(sig_t, true), false, true);
    cpu::sigmoid_gate_forward(g.data(), x.data(), y.data(), sig.data(), n, c);
  } else {
    F32View sig = view_of(ptrs, o.value(sig_t, false), true, false);
    F32View dy = grad_of(o, ptrs, y_t);
    F32View dg = grad_of(o, ptrs, g_t);
    F32View dx = grad_of(o, ptrs, x_t);
    cpu::sigmoid_gate_backward(sig.data(), x.data(), dy.data(), dg.data(), dx.data(), n, c);
  }
}

}  // namespace shardscope::engine::exec
