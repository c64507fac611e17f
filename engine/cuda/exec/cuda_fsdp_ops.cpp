// FSDP ops of the schedule on the GPU: casts and copies between the shard,
// gathered and unsharded layouts, collectives through the DeviceCommunicator
// on the op's stream, gradient reduction and accumulation, the optimizer step
// with its numerics (inf check, norm, unscale, clip) on device scalars, and
// the host's own ops when the optimizer is offloaded (cpu_offload: they run
// on pinned host memory after the schedule's host waits).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cpu/optim.h"
#include "engine/cuda/check.h"
#include "engine/cuda/exec/cuda_rank_executor.h"
#include "engine/exec/f32_view.h"
#include "engine/exec/host_optimizer.h"

namespace shardscope::engine::cuda {

using exec::ExecError;
using plan::OpKind;

void CudaRankExecutor::run_fsdp_op(int index, const plan::ScheduleOp& op,
                                   const std::vector<void*>& ptrs, cudaStream_t s) {
  const size_t nbuf = op.buffers.size();
  auto buf = [&](size_t i) -> const plan::Buffer& {
    return s_.buffers[static_cast<size_t>(op.buffers[i])];
  };
  auto dt = [&](size_t i) { return dtype_of(op.buffers[i]); };
  auto elems = [&](size_t i) { return elems_of(op.buffers[i]); };
  auto dev = [&](size_t i) { return DevPtr{ptrs[i], dt(i)}; };
  auto need = [&](size_t n) {
    if (nbuf < n)
      throw ExecError(std::string(plan::op_kind_name(op.kind)) + " op has " + std::to_string(nbuf) +
                      " buffers, expected " + std::to_string(n));
  };
  auto same_dtype = [&](size_t a, size_t b) {
    if (dt(a) != dt(b))
      throw ExecError(std::string(plan::op_kind_name(op.kind)) + ": buffers '" +
                      plan::buffer_name(g_, buf(a)) + "' (" + plan::dtype_name(dt(a)) + ") and '" +
                      plan::buffer_name(g_, buf(b)) + "' (" + plan::dtype_name(dt(b)) +
                      ") differ in dtype; the CUDA engine moves them as they are");
  };
  auto group_size = [&]() {
    return static_cast<int64_t>(s_.groups[static_cast<size_t>(op.group)].ranks.size());
  };
  auto layout = [&]() -> const DevLayout& {
    if (op.unit < 0) throw ExecError(std::string(plan::op_kind_name(op.kind)) + " op has no unit");
    return dev_layouts_[static_cast<size_t>(op.unit)];
  };

  switch (op.kind) {
    case OpKind::cast_params:
    case OpKind::h2d: {
      // src (fp32 shard, its host copy or the kept 1/k slice) -> dst, at this
      // rank's place when dst is the whole all-gather buffer.
      need(2);
      const int64_t n_src = elems(0), n_dst = elems(1);
      int64_t offset = 0;
      if (n_dst > n_src) {
        const bool slice = buf(0).role == plan::BufferRole::post_fwd_slice;
        offset = (slice ? reshard_index_ : shard_index_) * n_src;
      }
      if (offset + n_src > n_dst)
        throw ExecError("cast of " + std::to_string(n_src) + " elements does not fit its target");
      const DevPtr dst = dev(1).at(offset);
      const size_t bytes = static_cast<size_t>(n_src * plan::dtype_bytes(dt(0)));
      if (buf(0).on_host) {
        same_dtype(0, 1);
        SS_CUDA_CHECK(cudaMemcpyAsync(dst.ptr, ptrs[0], bytes, cudaMemcpyHostToDevice, s));
      } else if (dt(0) == dt(1)) {
        SS_CUDA_CHECK(cudaMemcpyAsync(dst.ptr, ptrs[0], bytes, cudaMemcpyDeviceToDevice, s));
      } else {
        cast(s, dev(0), dst, n_src);
      }
      return;
    }
    case OpKind::all_gather: {
      if (nbuf == 1) {  // fsdp2: in place, the input is this rank's slice of the output
        const int64_t per_rank = elems(0) / group_size();
        const std::vector<int>& members = s_.groups[static_cast<size_t>(op.group)].ranks;
        const auto me = static_cast<int64_t>(std::find(members.begin(), members.end(), s_.rank) -
                                             members.begin());
        comm_.all_gather(op.group, dev(0).at(me * per_rank).ptr, ptrs[0],
                         static_cast<size_t>(per_rank), dt(0), s);
        return;
      }
      need(2);
      same_dtype(0, 1);
      comm_.all_gather(op.group, ptrs[0], ptrs[1], static_cast<size_t>(elems(0)), dt(0), s);
      return;
    }
    case OpKind::copy_out: {
      need(2);
      const DevLayout& l = layout();
      if (l.identity && dt(0) == dt(1))
        SS_CUDA_CHECK(cudaMemcpyAsync(ptrs[1], ptrs[0],
                                      static_cast<size_t>(l.full_numel * plan::dtype_bytes(dt(0))),
                                      cudaMemcpyDeviceToDevice, s));
      else
        gathered_to_unsharded(s, l, dev(0), dev(1));
      return;
    }
    case OpKind::reshard_copy: {
      // Keep this rank's 1/k of the gathered layout (what the backward
      // all-gather over the reshard group puts back together).
      need(2);
      const int64_t len = elems(1);
      const ConstDevPtr src = dev(0);
      unsharded_to_gathered(s, layout(), &src, 1, dev(1), reshard_index_ * len, len);
      return;
    }
    case OpKind::grad_cast: {
      // Unsharded gradients (+ the no-sync accumulator) -> the reduce-scatter
      // input in the gathered layout and the reduce dtype.
      need(2);
      const size_t out = nbuf - 1;
      const int64_t n = elems(out);
      // Whole-unit sources (fsdp1's flat gradient, the no-sync accumulator)
      // are summed into the layout; fsdp2's per-parameter gradients
      // (plan::Buffer::param) are then added at their places.
      std::vector<ConstDevPtr> src, pieces;
      std::vector<int64_t> offsets, numels;
      for (size_t i = 0; i < out; ++i) {
        exec::UnshardedPlace at;
        try {
          at = exec::unsharded_place(buf(i).param, elems(i), n,
                                     &layouts_[static_cast<size_t>(op.unit)]);
        } catch (const std::invalid_argument& e) {
          throw ExecError("grad_cast op " + std::to_string(index) + ": " + e.what());
        }
        if (buf(i).param < 0) {
          src.push_back(dev(i));
          continue;
        }
        pieces.push_back(dev(i));
        offsets.push_back(at.offset);
        numels.push_back(at.numel);
      }
      if (src.empty())
        SS_CUDA_CHECK(
            cudaMemsetAsync(ptrs[out], 0, static_cast<size_t>(n * plan::dtype_bytes(dt(out))), s));
      else
        unsharded_to_gathered(s, layout(), src.data(), static_cast<int>(src.size()), dev(out), 0,
                              n);
      if (!pieces.empty())
        params_to_gathered(s, layout(), pieces.data(), offsets.data(), numels.data(),
                           static_cast<int>(pieces.size()), dev(out));
      return;
    }
    case OpKind::reduce_scatter: {
      need(2);
      same_dtype(0, 1);
      comm_.reduce_scatter(op.group, ptrs[0], ptrs[1], static_cast<size_t>(elems(1)), dt(0),
                           comm::ReduceOp::avg, s);
      return;
    }
    case OpKind::all_reduce: {
      if (nbuf == 0) {
        run_scalar_all_reduce(index, op, s);
        return;
      }
      comm_.all_reduce(op.group, ptrs[0], static_cast<size_t>(elems(0)), dt(0), comm::ReduceOp::avg,
                       s);
      return;
    }
    case OpKind::grad_accumulate: {
      need(2);
      if (buf(nbuf - 1).param >= 0) {
        // A shared parameter's gradients from two producers -> their sum
        // (plan/'s sum_shared_grads; the sum is zeroed by its first user).
        const size_t dst = nbuf - 1;
        for (size_t i = 0; i < dst; ++i) {
          if (buf(i).param != buf(dst).param || elems(i) != elems(dst))
            throw ExecError("grad_accumulate op " + std::to_string(index) +
                            ": a shared gradient sum of another parameter's gradient");
          add_inplace(s, dev(i), dev(dst), elems(dst));
        }
        return;
      }
      if (nbuf > 2 || buf(0).param >= 0) {
        // No-sync micro-step, fsdp2: each parameter's unsharded gradient
        // added into the unit's accumulator (unsharded layout) at its place.
        const size_t dst = nbuf - 1;
        const int eb = plan::dtype_bytes(dt(dst));
        for (size_t i = 0; i < dst; ++i) {
          exec::UnshardedPlace at;
          try {
            at = exec::unsharded_place(buf(i).param, elems(i), elems(dst),
                                       &layouts_[static_cast<size_t>(op.unit)]);
          } catch (const std::invalid_argument& e) {
            throw ExecError("grad_accumulate op " + std::to_string(index) + ": " + e.what());
          }
          add_inplace(s, dev(i), DevPtr{static_cast<char*>(ptrs[dst]) + at.offset * eb, dt(dst)},
                      at.numel);
        }
        return;
      }
      add_inplace(s, dev(0), dev(1), std::min(elems(0), elems(1)));
      return;
    }
    case OpKind::d2h: {
      // The reduced shard into the host gradient shard. That shard is zeroed
      // at the step's start and this op is its only writer in the step
      // (checked at start-up), so fp32 data is copied straight into it (its
      // "+=" is "="); other dtypes go through pinned staging and are added on
      // the host once the copy is known complete (host_wait / step end).
      need(2);
      if (!buf(1).on_host || buf(0).on_host)
        throw ExecError("d2h op " + std::to_string(index) + " does not copy device to host");
      const int64_t n = std::min(elems(0), elems(1));
      if (dt(0) == plan::DType::f32) {
        SS_CUDA_CHECK(cudaMemcpyAsync(ptrs[1], ptrs[0], static_cast<size_t>(n) * 4,
                                      cudaMemcpyDeviceToHost, s));
      } else {
        SS_CUDA_CHECK(cudaMemcpyAsync(d2h_staging_[static_cast<size_t>(index)], ptrs[0],
                                      static_cast<size_t>(n * plan::dtype_bytes(dt(0))),
                                      cudaMemcpyDeviceToHost, s));
        d2h_pending_[static_cast<size_t>(index)] = 1;
      }
      return;
    }
    case OpKind::inf_check: {
      for (size_t i = 0; i < nbuf; ++i) inf_check(s, dev(i), elems(i), &scalars_->found_inf);
      return;
    }
    case OpKind::grad_norm: {
      const Workspace ws = workspaces_[static_cast<size_t>(op.stream)];
      for (size_t i = 0; i < nbuf; ++i)
        squared_norm_accumulate(s, dev(i), elems(i), &scalars_->norm_sq, ws);
      return;
    }
    case OpKind::grad_scale: {
      if (op.purpose == plan::OpPurpose::unscale) {  // unscale by the loss scale
        const auto factor = static_cast<float>(1.0 / scaler_.scale);
        if (factor == 1.0f) return;
        for (size_t i = 0; i < nbuf; ++i) scale_inplace(s, dev(i), elems(i), factor, nullptr);
        return;
      }
      if (op.purpose != plan::OpPurpose::clip)
        throw ExecError("grad_scale without an unscale or clip purpose");
      // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), clamped to 1.
      clip_factor(s, &scalars_->norm_sq, *p_.grad_clip_norm, &scalars_->clip);
      for (size_t i = 0; i < nbuf; ++i) scale_inplace(s, dev(i), elems(i), 1.0f, &scalars_->clip);
      return;
    }
    case OpKind::optimizer: {
      need(2);
      const int64_t n = up_.units[static_cast<size_t>(op.unit)].shard_numel;
      auto* p = static_cast<float*>(ptrs[0]);
      const ConstDevPtr grad{ptrs[1], plan::DType::f32};
      float* state = nbuf > 2 ? static_cast<float*>(ptrs[2]) : nullptr;
      // GradScaler skips optimizer.step() when any rank saw inf/nan.
      const float* skip = scaler_.enabled ? &scalars_->found_inf : nullptr;
      const plan::OptimizerConfig& o = p_.optimizer;
      const int64_t step = optimizer_steps_ + 1;
      switch (o.type) {
        case plan::OptimizerType::adamw: {
          if (!state) throw ExecError("adamw optimizer op without its state buffer");
          const AdamWParams h{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay};
          adamw_step(s, p, grad, state, state + n, n, h, step, nullptr, skip);
          return;
        }
        case plan::OptimizerType::sgd: {
          const SgdParams h{o.lr, o.momentum, o.weight_decay};
          sgd_step(s, p, grad, o.momentum > 0 ? state : nullptr, n, h, step, nullptr, skip);
          return;
        }
      }
      return;
    }
    case OpKind::forward:  // graph ops: graph_op()
    case OpKind::backward:
    case OpKind::recompute:
      break;
  }
  throw ExecError(std::string("the CUDA engine cannot run op kind ") + plan::op_kind_name(op.kind) +
                  " on a device stream");
}

// The scalar all-reduce after an inf check (found_inf, summed: > 0 when any
// rank saw inf/nan) or a local norm (the squared norm, summed), in fp32 as the
// CPU engine's. A producer that ran on the host (cpu_offload) hands its value
// over through pinned memory, and gets the result back the same way (read by
// the host after the schedule's host_wait on this op).
void CudaRankExecutor::run_scalar_all_reduce(int index, const plan::ScheduleOp& op,
                                             cudaStream_t s) {
  const bool inf = op.purpose == plan::OpPurpose::inf_flag;  // else norm_sq (check_schedule)
  const bool from_host = scalar_from_host_[static_cast<size_t>(index)] != 0;
  float* value = inf ? &scalars_->found_inf : &scalars_->norm_sq_f32;
  float* exchange = inf ? &exchange_->found_inf : &exchange_->norm_sq;
  if (from_host) {
    *exchange = static_cast<float>(inf ? host_found_inf_ : host_norm_sq_);
    SS_CUDA_CHECK(cudaMemcpyAsync(value, exchange, sizeof(float), cudaMemcpyHostToDevice, s));
  } else if (!inf) {
    f64_to_f32(s, &scalars_->norm_sq, value);
  }
  comm_.all_reduce(op.group, value, 1, plan::DType::f32, comm::ReduceOp::sum, s);
  if (!inf) f32_to_f64(s, value, &scalars_->norm_sq);
  if (from_host)
    SS_CUDA_CHECK(cudaMemcpyAsync(exchange, value, sizeof(float), cudaMemcpyDeviceToHost, s));
}

// Host-stream ops (cpu_offload): the optimizer step's numerics and update on
// the pinned fp32 host shards, as the CPU engine runs them.
void CudaRankExecutor::run_host_op(const plan::ScheduleOp& op, const std::vector<void*>& ptrs) {
  const size_t nbuf = op.buffers.size();
  auto host_f32 = [&](size_t i) {
    const plan::Buffer& b = s_.buffers[static_cast<size_t>(op.buffers[i])];
    if (!b.on_host || dtype_of(op.buffers[i]) != plan::DType::f32)
      throw ExecError(std::string(plan::op_kind_name(op.kind)) + " on the host stream reads '" +
                      plan::buffer_name(g_, b) + "', which is not an fp32 host buffer");
    return static_cast<float*>(ptrs[i]);
  };
  auto elems = [&](size_t i) { return elems_of(op.buffers[i]); };
  switch (op.kind) {
    case OpKind::inf_check: {
      bool bad = false;
      for (size_t i = 0; i < nbuf; ++i) bad = bad || cpu::has_inf_or_nan(host_f32(i), elems(i));
      host_found_inf_ = bad ? 1.0 : 0.0;
      inf_on_host_ = true;
      return;
    }
    case OpKind::grad_norm: {
      double sq = 0;
      for (size_t i = 0; i < nbuf; ++i) sq += cpu::squared_norm(host_f32(i), elems(i));
      host_norm_sq_ = sq;
      norm_on_host_ = true;
      return;
    }
    case OpKind::grad_scale: {
      float factor = 1.0f;
      if (op.purpose == plan::OpPurpose::unscale) {
        factor = static_cast<float>(1.0 / scaler_.scale);
      } else if (op.purpose == plan::OpPurpose::clip) {
        grad_norm_ = std::sqrt(host_norm_sq_);
        factor = cpu::clip_factor(grad_norm_, *p_.grad_clip_norm);
      } else {
        throw ExecError("grad_scale without an unscale or clip purpose");
      }
      if (factor == 1.0f) return;
      for (size_t i = 0; i < nbuf; ++i) cpu::scale_inplace(host_f32(i), elems(i), factor);
      return;
    }
    case OpKind::optimizer: {
      if (nbuf < 2) throw ExecError("optimizer op has fewer than 2 buffers");
      if (scaler_.enabled && host_found_inf_ > 0) return;  // GradScaler skips the step
      const int64_t n = up_.units[static_cast<size_t>(op.unit)].shard_numel;
      float* p = host_f32(0);
      const float* grad = host_f32(1);
      float* state = nbuf > 2 ? host_f32(2) : nullptr;
      exec::host_optimizer_step(p_.optimizer, p, grad, state, n, optimizer_steps_ + 1);
      return;
    }
    case OpKind::forward:  // the host runs only the offloaded optimizer step
    case OpKind::backward:
    case OpKind::recompute:
    case OpKind::cast_params:
    case OpKind::copy_out:
    case OpKind::reshard_copy:
    case OpKind::all_gather:
    case OpKind::reduce_scatter:
    case OpKind::all_reduce:
    case OpKind::grad_cast:
    case OpKind::grad_accumulate:
    case OpKind::h2d:
    case OpKind::d2h:
      break;
  }
  throw ExecError(std::string("the CUDA engine cannot run op kind ") + plan::op_kind_name(op.kind) +
                  " on the host stream");
}

// A staged device-to-host gradient copy is complete: add it into the host shard.
void CudaRankExecutor::finish_d2h(int index) {
  if (!d2h_pending_[static_cast<size_t>(index)]) return;
  d2h_pending_[static_cast<size_t>(index)] = 0;
  const plan::ScheduleOp& op = s_.ops[static_cast<size_t>(index)];
  const int src = op.buffers[0], dst = op.buffers[1];
  const int64_t n = std::min(elems_of(src), elems_of(dst));
  std::vector<float> values(static_cast<size_t>(n));
  exec::load_f32(d2h_staging_[static_cast<size_t>(index)], dtype_of(src), values.data(), n);
  auto* out = static_cast<float*>(runner_->address(dst));
  for (int64_t j = 0; j < n; ++j) out[j] += values[static_cast<size_t>(j)];
}

}  // namespace shardscope::engine::cuda
