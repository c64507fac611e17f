// Mixture-of-experts graph ops on the GPU (moe_router, moe_dispatch,
// moe_combine, sigmoid_gate; engine/cuda/ops/moe.cu), with the CPU engine's
// semantics (engine/exec/exec_moe_ops.h: forced routing under a stated
// token_balance, real top-k under moe_routing "topk").
//
// Nothing here waits for the device: every launch is sized by the plan (an
// expert's rows: exact under forced routing, every token under top-k). The
// dispatch kernel counts the rows its expert really got and, when that
// breaks the plan, sets the op's error flag to 1 + the count; the flags are
// read at the end of the step (check_error_flags -> moe_flag_message).
//
// Per router (by graph op), device memory of the executor's own, outside the
// allocator (other memory, as the workspaces), made at start-up sizing:
// forced routing's cumulative slot counts (exec::forced_routing_ends, E
// int64) and the step's tokens per expert (E int64, zeroed at each step's
// start, added to by the router's forward, not its recompute).
#include <cuda_runtime.h>

#include <climits>
#include <string>
#include <vector>

#include "engine/cuda/check.h"
#include "engine/cuda/exec/cuda_rank_executor.h"
#include "engine/exec/exec_moe_ops.h"
#include "engine/exec/graph_operands.h"

namespace shardscope::engine::cuda {

using exec::ExecError;
using exec::Operand;

namespace {

bool topk_routing(const plan::Workload& w) {
  return w.balance && w.balance->mode == plan::TokenBalance::Mode::all_tokens;
}

}  // namespace

bool CudaRankExecutor::is_moe_op(plan::OpType type) {
  return type == plan::OpType::moe_router || type == plan::OpType::moe_dispatch ||
         type == plan::OpType::moe_combine || type == plan::OpType::sigmoid_gate;
}

size_t CudaRankExecutor::moe_graph_op(int index, const plan::ScheduleOp& sop,
                                      const std::vector<void*>* ptrs, cudaStream_t s) {
  const exec::GraphOperands o(g_, up_, layouts_, s_, sop);
  const plan::Op& op = o.op();
  const bool backward = o.backward();
  const bool sizing = ptrs == nullptr;
  const plan::Workload& w = s_.workload;
  const int64_t tokens = w.batch * w.seq;
  const bool topk = topk_routing(w);

  auto dev = [&](const Operand& x) -> DevPtr {
    if (sizing || x.slot < 0) return DevPtr{nullptr, x.dtype};
    return DevPtr{static_cast<char*>((*ptrs)[static_cast<size_t>(x.slot)]) +
                      x.offset * plan::dtype_bytes(x.dtype),
                  x.dtype};
  };
  auto i64 = [&](int tensor, bool output) -> int64_t* {
    const Operand x = o.value(tensor, output);
    if (x.dtype != plan::DType::i64)
      throw ExecError("op '" + op.name + "': tensor '" + o.tensor_name(tensor) +
                      "' is not i64 storage");
    return static_cast<int64_t*>(dev(x).ptr);
  };
  auto grad = [&](int tensor) -> DevPtr {
    auto gv = o.grad(tensor);
    if (!gv) throw o.missing("the gradient of " + o.tensor_name(tensor));
    return dev(*gv);
  };
  auto expect_numel = [&](int tensor, int64_t numel) {
    if (o.numel(tensor) != numel)
      throw ExecError("op '" + op.name + "': tensor '" + o.tensor_name(tensor) + "' has " +
                      std::to_string(o.numel(tensor)) + " elements, expected " +
                      std::to_string(numel));
  };

  switch (op.type) {
    case plan::OpType::moe_router: {
      const int64_t experts = o.attr_i(op.attrs.num_experts, "num_experts");
      const int64_t k = o.attr_i(op.attrs.top_k, "top_k");
      const bool normalize = op.attrs.norm_topk_prob.value_or(false);
      const int logits_t = op.inputs.at(0), weights_t = op.outputs.at(0);
      const int indices_t = op.outputs.at(1), probs_t = op.outputs.at(2);
      expect_numel(logits_t, tokens * experts);
      expect_numel(indices_t, tokens * k);
      if (sizing && !moe_routers_.count(sop.graph_op)) {
        MoeRouter r;
        r.experts = experts;
        if (!topk) {
          const std::vector<int64_t> ends =
              exec::forced_routing_ends(w.seq, experts, k, w.balance.get());
          auto* d = static_cast<int64_t*>(device_alloc(ends.size() * sizeof(int64_t)));
          SS_CUDA_CHECK(
              cudaMemcpy(d, ends.data(), ends.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
          r.forced_ends = d;
        }
        r.counts = static_cast<int64_t*>(device_alloc(static_cast<size_t>(experts) * 8));
        SS_CUDA_CHECK(cudaMemset(r.counts, 0, static_cast<size_t>(experts) * 8));
        moe_routers_[sop.graph_op] = r;
      }
      if (sizing) return 0;
      const auto it = moe_routers_.find(sop.graph_op);
      if (it == moe_routers_.end())
        throw ExecError("op '" + op.name + "': no router tables (start-up sizing missed it)");
      if (!backward) {
        moe_router_forward(s, dev(o.value(logits_t, false)), dev(o.value(probs_t, true)),
                           i64(indices_t, true), dev(o.value(weights_t, true)), tokens, experts, k,
                           normalize, topk ? nullptr : it->second.forced_ends, w.seq,
                           sop.kind == plan::OpKind::forward ? it->second.counts : nullptr);
      } else {
        moe_router_backward(s, dev(o.value(probs_t, false)), i64(indices_t, false), grad(weights_t),
                            grad(logits_t), tokens, experts, k, normalize);
      }
      return 0;
    }
    case plan::OpType::moe_dispatch: {
      const int64_t k = o.attr_i(op.attrs.top_k, "top_k");
      const int x_t = op.inputs.at(0), xe_t = op.outputs.at(0), slots_t = op.outputs.at(1);
      const int64_t c = o.last_dim(x_t), rows = o.numel(slots_t);
      const int64_t expert = o.attr_i(op.attrs.expert, "expert");
      expect_numel(x_t, tokens * c);
      expect_numel(xe_t, rows * c);
      if (!backward) {
        const int64_t* idx = i64(op.inputs.at(1), false);
        int64_t* slots = i64(slots_t, true);
        const DevPtr x = dev(o.value(x_t, false)), xe = dev(o.value(xe_t, true));
        if (sizing) return 0;
        moe_dispatch_forward(s, x, idx, xe, slots, tokens, w.seq, c, k, expert, rows, !topk,
                             flags_ + index);
      } else {
        const int64_t* slots = i64(slots_t, false);
        const DevPtr dxe = grad(xe_t), dx = grad(x_t);
        if (sizing) return 0;
        moe_dispatch_backward(s, dxe, slots, dx, rows, c, k, tokens);
      }
      return 0;
    }
    case plan::OpType::moe_combine: {
      const int64_t experts = o.attr_i(op.attrs.num_experts, "num_experts");
      const int64_t k = o.attr_i(op.attrs.top_k, "top_k");
      // inputs: E expert outputs, the weights, E slots; outputs: out, E weighted products.
      if (op.inputs.size() != static_cast<size_t>(2 * experts + 1))
        throw ExecError("op '" + op.name + "': expects 2 * num_experts + 1 inputs");
      if (op.outputs.size() != static_cast<size_t>(experts + 1))
        throw ExecError("op '" + op.name + "': expects 1 + num_experts outputs");
      const int weights_t = op.inputs[static_cast<size_t>(experts)], out_t = op.outputs.at(0);
      const int64_t c = o.last_dim(out_t);
      expect_numel(out_t, tokens * c);
      expect_numel(weights_t, tokens * k);
      std::vector<ConstDevPtr> y;
      std::vector<const int64_t*> slots;
      std::vector<int64_t> rows;
      for (int64_t e = 0; e < experts; ++e) {
        const int y_t = op.inputs[static_cast<size_t>(e)];
        const int slots_t = op.inputs[static_cast<size_t>(experts + 1 + e)];
        rows.push_back(o.numel(slots_t));
        expect_numel(y_t, rows.back() * c);
        y.push_back(dev(o.value(y_t, false)));
        slots.push_back(i64(slots_t, false));
      }
      const DevPtr weights = dev(o.value(weights_t, false));
      if (!backward) {
        const DevPtr out = dev(o.value(out_t, true));
        std::vector<DevPtr> weighted;
        for (int64_t e = 0; e < experts; ++e)
          weighted.push_back(dev(o.value(op.outputs[static_cast<size_t>(e + 1)], true)));
        const size_t bytes = moe_combine_forward_workspace_bytes(out.dt, tokens, c);
        if (sizing) return bytes;
        const Workspace& ws = workspaces_[static_cast<size_t>(sop.stream)];
        if (bytes > ws.bytes)
          throw ExecError("op '" + op.name + "': stream workspace of " + std::to_string(ws.bytes) +
                          " bytes is smaller than the " + std::to_string(bytes) +
                          " it needs (start-up sizing missed it)");
        moe_combine_forward(s, y.data(), slots.data(), rows.data(), experts, weights, out, tokens,
                            c, k, weighted.data(), Workspace{ws.ptr, bytes});
      } else {
        const DevPtr dout = grad(out_t), dweights = grad(weights_t);
        std::vector<DevPtr> dy;
        for (int64_t e = 0; e < experts; ++e) dy.push_back(grad(op.inputs[static_cast<size_t>(e)]));
        if (sizing) return 0;
        moe_combine_backward(s, y.data(), slots.data(), rows.data(), experts, weights, dout,
                             dy.data(), dweights, tokens, c, k);
      }
      return 0;
    }
    case plan::OpType::sigmoid_gate: {
      const int g_t = op.inputs.at(0), x_t = op.inputs.at(1);
      const int y_t = op.outputs.at(0), sig_t = op.outputs.at(1);
      const int64_t n = o.numel(g_t), c = o.last_dim(x_t);
      if (o.last_dim(g_t) != 1 || o.numel(x_t) != n * c)
        throw ExecError("op '" + op.name +
                        "': expects a gate [.., 1] and x [.., C] of as many rows");
      const DevPtr x = dev(o.value(x_t, false));
      if (!backward) {
        const DevPtr g = dev(o.value(g_t, false)), y = dev(o.value(y_t, true)),
                     sig = dev(o.value(sig_t, true));
        if (sizing) return 0;
        sigmoid_gate_forward(s, g, x, y, sig, n, c);
      } else {
        const DevPtr sig = dev(o.value(sig_t, false)), dy = grad(y_t), dg = grad(g_t),
                     dx = grad(x_t);
        if (sizing) return 0;
        sigmoid_gate_backward(s, sig, x, dy, dg, dx, n, c);
      }
      return 0;
    }
    default:
      break;
  }
  throw ExecError("op '" + op.name + "': not a mixture-of-experts op");
}

std::string CudaRankExecutor::moe_flag_message(const plan::ScheduleOp& sop, int32_t flag) const {
  const exec::GraphOperands o(g_, up_, layouts_, s_, sop);
  const plan::Op& op = o.op();
  const int64_t rows = o.numel(op.outputs.at(1));
  const int64_t expert = op.attrs.expert.value_or(-1);
  const std::string found =
      flag == INT_MAX ? "at least " + std::to_string(INT_MAX - 1) : std::to_string(flag - 1);
  if (topk_routing(s_.workload))
    return "expert " + std::to_string(expert) + " got " + found + " rows, more than its " +
           std::to_string(rows);
  return "forced routing gave expert " + std::to_string(expert) + " " + found + " rows, the plan " +
         std::to_string(rows);
}

void CudaRankExecutor::zero_expert_tokens(cudaStream_t s) {
  for (const auto& entry : moe_routers_)
    SS_CUDA_CHECK(cudaMemsetAsync(entry.second.counts, 0,
                                  static_cast<size_t>(entry.second.experts) * sizeof(int64_t), s));
}

std::vector<std::vector<std::vector<int64_t>>> CudaRankExecutor::gather_expert_tokens() {
  std::vector<std::vector<std::vector<int64_t>>> out;
  if (moe_routers_.empty()) return out;
  SS_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int64_t> mine;  // every router's counts, graph order (std::map's)
  for (const auto& entry : moe_routers_) {
    const size_t at = mine.size();
    mine.resize(at + static_cast<size_t>(entry.second.experts));
    SS_CUDA_CHECK(cudaMemcpy(mine.data() + at, entry.second.counts,
                             static_cast<size_t>(entry.second.experts) * sizeof(int64_t),
                             cudaMemcpyDeviceToHost));
  }
  // Emulated peers move no data: this rank's counts only. NCCL: every rank's,
  // an all-gather over the world group (0) of the counts' bytes (as fp32
  // words: an all-gather copies bits, it adds nothing).
  const int ranks = comm_.kind() == CommunicatorKind::emulated ? 1 : comm_.world_size();
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(ranks));
  if (ranks == 1) {
    all = mine;
  } else {
    const size_t bytes = mine.size() * sizeof(int64_t);
    void* buffer = nullptr;
    SS_CUDA_CHECK(cudaMalloc(&buffer, bytes * static_cast<size_t>(ranks)));
    try {
      char* slot = static_cast<char*>(buffer) + bytes * static_cast<size_t>(comm_.rank());
      cudaStream_t compute = streams_[static_cast<size_t>(compute_)];
      SS_CUDA_CHECK(cudaMemcpyAsync(slot, mine.data(), bytes, cudaMemcpyHostToDevice, compute));
      comm_.all_gather(0, slot, buffer, bytes / sizeof(float), plan::DType::f32, compute);
      SS_CUDA_CHECK(cudaMemcpyAsync(all.data(), buffer, bytes * static_cast<size_t>(ranks),
                                    cudaMemcpyDeviceToHost, compute));
      SS_CUDA_CHECK(cudaStreamSynchronize(compute));
    } catch (...) {
      cudaFree(buffer);
      throw;
    }
    SS_CUDA_CHECK(cudaFree(buffer));
  }
  size_t at = 0;
  out.resize(static_cast<size_t>(ranks));
  for (auto& rank : out)
    for (const auto& entry : moe_routers_) {
      const auto n = static_cast<size_t>(entry.second.experts);
      rank.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(at),
                        all.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
    }
  return out;
}

}  // namespace shardscope::engine::cuda
