// FSDP ops of the schedule: casts and copies between the shard, gathered and
// unsharded layouts (engine/exec/layout.h), collectives through the
// communicator, gradient reduction and accumulation, and the optimizer step
// (clipping, loss-scale unscaling and inf checks, AdamW/SGD on the shards).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cpu/optim.h"
#include "engine/exec/f32_view.h"
#include "engine/exec/host_optimizer.h"
#include "engine/exec/rank_executor.h"

namespace shardscope::engine::exec {

using plan::OpKind;

void RankExecutor::run_fsdp_op(const Task& task, const plan::ScheduleOp& op) {
  const size_t nbuf = op.buffers.size();
  auto buf = [&](size_t i) -> const plan::Buffer& {
    return s_.buffers[static_cast<size_t>(op.buffers[i])];
  };
  auto dt = [&](size_t i) { return buffer_dtype(op.buffers[i]); };
  auto elems = [&](size_t i) { return buf(i).bytes / plan::dtype_bytes(dt(i)); };
  auto need = [&](size_t n) {
    if (nbuf < n)
      throw ExecError(std::string(plan::op_kind_name(op.kind)) + " op has " + std::to_string(nbuf) +
                      " buffers, expected " + std::to_string(n));
  };
  const UnitLayout* layout = op.unit >= 0 ? &layouts_[static_cast<size_t>(op.unit)] : nullptr;
  auto comm_group = [&]() { return op.group; };
  auto group_size = [&]() {
    return static_cast<int64_t>(s_.groups[static_cast<size_t>(op.group)].ranks.size());
  };

  switch (op.kind) {
    case OpKind::cast_params:
    case OpKind::h2d: {
      // src (fp32 shard, host copy or the kept 1/k slice) -> dst, at this rank's
      // place when dst is the whole all-gather buffer.
      need(2);
      const int64_t n_src = elems(0), n_dst = elems(1);
      int64_t offset = 0;
      if (n_dst > n_src) {
        const bool slice = buf(0).role == plan::BufferRole::post_fwd_slice;
        offset = (slice ? reshard_index_ : shard_index_) * n_src;
      }
      if (offset + n_src > n_dst)
        throw ExecError("cast of " + std::to_string(n_src) + " elements does not fit its target");
      if (dt(0) == dt(1)) {
        const int eb = plan::dtype_bytes(dt(0));
        std::memcpy(static_cast<char*>(task.ptrs[1]) + offset * eb, task.ptrs[0],
                    static_cast<size_t>(n_src * eb));
      } else {
        F32View src(task.ptrs[0], dt(0), 0, n_src, true, false);
        store_f32(src.data(), static_cast<char*>(task.ptrs[1]) + offset * plan::dtype_bytes(dt(1)),
                  dt(1), n_src);
      }
      return;
    }
    case OpKind::all_gather: {
      if (nbuf == 1) {  // fsdp2: in place, the input is this rank's slice of the output
        const size_t per_rank = static_cast<size_t>(buf(0).bytes / group_size());
        const std::vector<int>& members = s_.groups[static_cast<size_t>(op.group)].ranks;
        const auto me = static_cast<size_t>(std::find(members.begin(), members.end(), s_.rank) -
                                            members.begin());
        char* out = static_cast<char*>(task.ptrs[0]);
        comm_.all_gather(comm_group(), out + me * per_rank, out, per_rank);
        return;
      }
      need(2);
      comm_.all_gather(comm_group(), task.ptrs[0], task.ptrs[1], static_cast<size_t>(buf(0).bytes));
      return;
    }
    case OpKind::copy_out: {
      need(2);
      layout->gathered_to_unsharded(task.ptrs[0], task.ptrs[1], plan::dtype_bytes(dt(0)));
      return;
    }
    case OpKind::reshard_copy: {
      // Keep this rank's 1/k of the gathered layout (what the backward
      // all-gather over the reshard group puts back together).
      need(2);
      const int eb = plan::dtype_bytes(dt(0));
      std::vector<char> gathered(static_cast<size_t>(layout->full_numel() * eb));
      layout->unsharded_to_gathered(task.ptrs[0], gathered.data(), eb);
      const int64_t len = elems(1);
      std::memcpy(task.ptrs[1], gathered.data() + reshard_index_ * len * eb,
                  static_cast<size_t>(len * eb));
      return;
    }
    case OpKind::grad_cast: {
      // Unsharded gradients (+ the no-sync accumulator) -> the reduce-scatter
      // input in the gathered layout and the reduce dtype.
      need(2);
      const size_t out = nbuf - 1;
      const int64_t n = elems(out);
      std::vector<float> sum(static_cast<size_t>(n), 0.0f);
      for (size_t i = 0; i < out; ++i) {
        // One parameter's gradient (fsdp2): added at its place in the layout.
        const auto [at, len] = unsharded_place(buf(i).param, elems(i), n, layout);
        F32View v(task.ptrs[i], dt(i), 0, len, true, false);
        for (int64_t j = 0; j < len; ++j) sum[static_cast<size_t>(at + j)] += v.data()[j];
      }
      std::vector<float> gathered(static_cast<size_t>(n));
      layout->unsharded_to_gathered(sum.data(), gathered.data(), 4);
      store_f32(gathered.data(), task.ptrs[out], dt(out), n);
      return;
    }
    case OpKind::reduce_scatter: {
      need(2);
      const int64_t n_in = elems(0), n_out = elems(1);
      F32View in(task.ptrs[0], dt(0), 0, n_in, true, false);
      F32View out(task.ptrs[1], dt(1), 0, n_out, false, true);
      comm_.reduce_scatter(comm_group(), in.data(), out.data(), static_cast<size_t>(n_out),
                           comm::ReduceOp::avg);
      return;
    }
    case OpKind::all_reduce: {
      if (nbuf == 0) {  // one scalar: found_inf (max, as a sum of flags) or the squared norm
        const bool inf = op.purpose == plan::OpPurpose::inf_flag;
        if (!inf && op.purpose != plan::OpPurpose::norm_sq)
          throw ExecError("scalar all-reduce without an inf_flag or norm_sq purpose");
        float v = static_cast<float>(inf ? found_inf_ : norm_sq_);
        comm_.all_reduce(comm_group(), &v, 1, comm::ReduceOp::sum);
        if (inf)
          found_inf_ = v;
        else
          norm_sq_ = v;
        return;
      }
      F32View data(task.ptrs[0], dt(0), 0, elems(0), true, true);
      comm_.all_reduce(comm_group(), data.data(), static_cast<size_t>(elems(0)),
                       comm::ReduceOp::avg);
      return;
    }
    case OpKind::grad_accumulate:
      if (buf(nbuf - 1).param >= 0) {
        // A shared parameter's gradients from two producers -> their sum,
        // all three the parameter's own unsharded gradient (plan/'s
        // sum_shared_grads). The sum is zeroed by its first user: this op.
        need(3);
        const size_t dst = nbuf - 1;
        const int64_t n = elems(dst);
        F32View acc(task.ptrs[dst], dt(dst), 0, n, true, true);
        for (size_t i = 0; i < dst; ++i) {
          if (buf(i).param != buf(dst).param || elems(i) != n)
            throw ExecError(
                "grad_accumulate: a shared gradient sum of another parameter's gradient");
          F32View v(task.ptrs[i], dt(i), 0, n, true, false);
          for (int64_t j = 0; j < n; ++j) acc.data()[j] += v.data()[j];
        }
        return;
      }
      if (nbuf > 2 || buf(0).param >= 0) {
        // No-sync micro-step, fsdp2: each parameter's unsharded gradient
        // added into the unit's accumulator at its place.
        const size_t dst = nbuf - 1;
        const int64_t n = elems(dst);
        F32View acc(task.ptrs[dst], dt(dst), 0, n, true, true);
        for (size_t i = 0; i < dst; ++i) {
          const auto [at, len] = unsharded_place(buf(i).param, elems(i), n, layout);
          F32View v(task.ptrs[i], dt(i), 0, len, true, false);
          for (int64_t j = 0; j < len; ++j) acc.data()[at + j] += v.data()[j];
        }
        return;
      }
      [[fallthrough]];
    case OpKind::d2h: {
      need(2);
      const int64_t n = std::min(elems(0), elems(1));
      F32View src(task.ptrs[0], dt(0), 0, n, true, false);
      F32View dst(task.ptrs[1], dt(1), 0, n, true, true);
      for (int64_t j = 0; j < n; ++j) dst.data()[j] += src.data()[j];
      return;
    }
    case OpKind::inf_check: {
      bool bad = false;
      for (size_t i = 0; i < nbuf; ++i)
        bad = bad || cpu::has_inf_or_nan(static_cast<const float*>(task.ptrs[i]), elems(i));
      found_inf_ = bad ? 1.0 : 0.0;
      return;
    }
    case OpKind::grad_norm: {
      double sq = 0;
      for (size_t i = 0; i < nbuf; ++i)
        sq += cpu::squared_norm(static_cast<const float*>(task.ptrs[i]), elems(i));
      norm_sq_ = sq;
      local_norm_sq_ = sq;
      return;
    }
    case OpKind::grad_scale: {
      float factor = 1.0f;
      if (op.purpose == plan::OpPurpose::unscale) {
        factor = static_cast<float>(1.0 / scaler_.scale);
      } else if (op.purpose == plan::OpPurpose::clip) {
        grad_norm_ = std::sqrt(norm_sq_);
        factor = cpu::clip_factor(grad_norm_, *p_.grad_clip_norm);
      } else {
        throw ExecError("grad_scale without an unscale or clip purpose");
      }
      if (factor == 1.0f) return;
      for (size_t i = 0; i < nbuf; ++i)
        cpu::scale_inplace(static_cast<float*>(task.ptrs[i]), elems(i), factor);
      return;
    }
    case OpKind::optimizer: {
      need(2);
      if (scaler_.enabled && found_inf_ > 0) return;  // GradScaler skips optimizer.step()
      const int64_t s = up_.units[static_cast<size_t>(op.unit)].shard_numel;
      auto* p = static_cast<float*>(task.ptrs[0]);
      const auto* grad = static_cast<const float*>(task.ptrs[1]);
      float* state = nbuf > 2 ? static_cast<float*>(task.ptrs[2]) : nullptr;
      host_optimizer_step(p_.optimizer, p, grad, state, s, optimizer_steps_ + 1);
      return;
    }
    case OpKind::forward:  // graph ops: run_graph_op
    case OpKind::backward:
    case OpKind::recompute:
      break;
  }
  throw ExecError(std::string("the CPU engine cannot run op kind ") + plan::op_kind_name(op.kind));
}

}  // namespace shardscope::engine::exec
