// Step-schedule builder, FSDP unit mechanics: unshard (casts, copy-in,
// all-gather, copy-out), reshard after forward (true / false / k), backward
// prefetch, and gradient reduction (reduce-scatter, hybrid and DDP all-reduce,
// accumulation without sync, offload copies).
#include <algorithm>
#include <string>

#include "plan/schedule_builder.h"

namespace shardscope::plan::detail {

void Builder::unshard(int u) {
  UnitState& st = state_[u];
  if (st.gathered) return;
  st.gathered = true;
  if (!has_params(u)) return;
  if (in_place(u)) {
    st.unsharded_buf = param_shard_[u];
    st.ready_op = -1;
    return;
  }
  const int64_t s = shard(u);
  const bool backward_slice = st.post_fwd_buf >= 0;
  const int group = backward_slice ? g_reshard_ : g_shard_;
  // fsdp1's rate limiter: at most two unsharded units awaiting their free.
  if (!fsdp2_ && p_.limit_all_gathers && n_ > 1 && free_queue_.size() >= 2) {
    host_wait(free_queue_.front());
    free_queue_.erase(free_queue_.begin());
  }
  const int copy_stream = fsdp2_ ? copy_in_ : pre_unshard_;
  int src = param_shard_[u];
  int h2d_buf = -1;
  if (offload_ && !backward_slice) {
    h2d_buf = alloc(BufferRole::h2d_shard, s * 4, copy_stream, u);
    launch_simple(OpKind::h2d, copy_stream, u, {param_shard_[u], h2d_buf}, {}, s * 4);
    src = h2d_buf;
  }
  if (backward_slice) src = st.post_fwd_buf;
  const int b_p = bp(u);
  const int64_t full_bytes = n_ * s * b_p;
  const DType pdt = this->pdt(u);

  if (n_ == 1) {
    // DDP: no collective; a cast (or the device copy when offloading in fp32)
    // stands in for the unsharded parameters.
    if (b_p != 4) {
      int lp = alloc(BufferRole::unsharded, full_bytes, copy_stream, u);
      st.ready_op =
          launch_simple(OpKind::cast_params, copy_stream, u, {src, lp}, {}, s * (4 + b_p), pdt);
      free_buf(h2d_buf);
      st.unsharded_buf = lp;
    } else {
      st.unsharded_buf = h2d_buf;
      st.ready_op = static_cast<int>(s_.ops.size()) - 1;
    }
    return;
  }

  if (fsdp2_) {
    const int64_t in_elems = backward_slice ? n_ * s / k_of(u) : s;
    const int64_t src_bytes = backward_slice ? b_p : 4;
    // Mixed precision (a param dtype other than fp32, no offload): FSDP2's
    // _get_param_all_gather_inputs first casts the shards into one flat
    // param-dtype tensor of its own (torch.empty, then _foreach_copy_), and
    // only then allocates the all-gather output, whose rank slice
    // all_gather_copy_in fills from it
    // (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py,
    // foreach_all_gather): a block of the copy-in stream's pool (the H200
    // snapshots: a 2 MiB small segment on that stream beside the outputs'
    // large one). It lives until foreach_all_gather returns, after the
    // all-gather is issued (`del param_all_gather_inputs` drops one
    // reference; the local all_gather_inputs still holds views of it). The
    // cast writes the output directly here: no op reads this buffer, it
    // holds the memory PyTorch holds.
    const int flat_in =
        b_p != 4 && !offload_ ? alloc(BufferRole::lowp_shard, in_elems * b_p, copy_in_, u) : -1;
    // The all-gather input is this rank's slice of the output.
    int out = alloc(BufferRole::ag_out, full_bytes, copy_in_, u);
    // The copy-in stream waits for compute's write of the kept slice (FSDP2's
    // copy-in stream waits on the current stream before copying in).
    SmallVector<int, 4> copy_waits;
    if (backward_slice) copy_waits.push_back(st.post_fwd_op);
    int copy = launch_simple(OpKind::cast_params, copy_in_, u, {src, out}, copy_waits,
                             in_elems * (src_bytes + b_p), pdt);
    free_buf(h2d_buf);
    st.ag_op = collective(OpKind::all_gather, ag_, u, group, full_bytes, pdt, {out}, {copy});
    free_buf(flat_in);
    st.ag_out_buf = out;
    st.ready_op = -1;
    return;
  }

  // fsdp1: cast on the pre-unshard stream, all-gather on the unshard stream.
  int input = src;
  int cast = -1;
  int lp = -1;
  if (b_p != 4) {
    lp = alloc(BufferRole::lowp_shard, s * b_p, pre_unshard_, u);
    cast = launch_simple(OpKind::cast_params, pre_unshard_, u, {src, lp}, {}, s * (4 + b_p), pdt);
    input = lp;
  }
  int full = alloc(BufferRole::unsharded, full_bytes, unshard_, u);
  int wait = cast >= 0 ? cast : (h2d_buf >= 0 ? static_cast<int>(s_.ops.size()) - 1 : -1);
  int ag =
      collective(OpKind::all_gather, unshard_, u, group, full_bytes, pdt, {input, full}, {wait});
  free_buf(lp);
  free_buf(h2d_buf);
  st.unsharded_buf = full;
  st.ready_op = ag;
}

// Makes compute wait for unit u's parameters (fsdp2: copy-out first).
void Builder::wait_for_unshard(int u) {
  unshard(u);
  UnitState& st = state_[u];
  if (!has_params(u)) return;
  if (fsdp2_ && st.ag_out_buf >= 0) {
    const int64_t full_bytes = n_ * shard(u) * bp(u);
    // FSDPParamGroup.wait_for_unshard copies this unit's output out into the
    // unsharded parameters. The output kept from the previous forward unit
    // is released only when the function returns, after that copy-out: it
    // clears comm_ctx.all_gather_state first, but its local
    // `prev_all_gather_state` still holds the state (torch 2.9.1; measured:
    // a GPT-NeoX root's 412 MB output is live during layer 0's copy-out).
    int full = alloc(BufferRole::unsharded, full_bytes, compute_, u);
    int copy = launch_simple(OpKind::copy_out, compute_, u, {st.ag_out_buf, full}, {st.ag_op},
                             2 * full_bytes, pdt(u));
    // reshard_after_forward=k: the kept slice is dropped once the parameters
    // are whole again (FSDPParam.to_unsharded), after compute has waited for
    // the all-gather that read it.
    if (st.post_fwd_buf >= 0) {
      free_buf(st.post_fwd_buf);
      st.post_fwd_buf = -1;
      st.post_fwd_op = -1;
    }
    free_buf(prev_fwd_ag_out_);
    prev_fwd_ag_out_ = -1;
    if (phase_ == Phase::forward) {
      // Keep this output until the next unit's wait_for_unshard (the
      // all-gather state of the forward), so the next all-gather's copy-in
      // writes elsewhere while this one is copied out.
      prev_fwd_ag_out_ = st.ag_out_buf;
    } else {
      free_buf(st.ag_out_buf);
    }
    st.ag_out_buf = -1;
    st.ag_op = -1;
    st.unsharded_buf = full;
    st.ready_op = copy;
    return;
  }
  if (st.ready_op >= 0) compute_waits().push_back(st.ready_op);
}

void Builder::reshard(int u) {
  UnitState& st = state_[u];
  if (!st.gathered) return;
  st.gathered = false;
  if (st.unsharded_buf >= 0 && !s_.buffers[st.unsharded_buf].persistent) {
    free_buf(st.unsharded_buf);
    if (!fsdp2_ && p_.limit_all_gathers && n_ > 1) free_queue_.push_back(last_compute_);
  }
  st.unsharded_buf = -1;
  st.ready_op = -1;
}

void Builder::post_forward(int u) {
  if (!has_params(u)) return;
  // reshard_after_forward=false (the root's default: unit_settings); a unit
  // whose parameters compute reads in place (DDP) has nothing to free.
  const int64_t k = k_of(u);
  if (k == 1 || n_ == 1) return;
  UnitState& st = state_[u];
  if (k < n_) {
    // fsdp2 reshard_after_forward=k: keep this rank's 1/k slice of the whole unit.
    const int64_t slice_bytes = n_ * shard(u) * bp(u) / k;
    int slice = alloc(BufferRole::post_fwd_slice, slice_bytes, compute_, u);
    st.post_fwd_op = launch_simple(OpKind::reshard_copy, compute_, u, {st.unsharded_buf, slice}, {},
                                   2 * slice_bytes, pdt(u));
    reshard(u);
    st.post_fwd_buf = slice;
    return;
  }
  reshard(u);
}

void Builder::pre_backward(int u) {
  backward_started_[u] = true;
  unshard(u);
  const int next =
      p_.backward_prefetch == BackwardPrefetch::pre ? next_unit(Phase::backward, u) : -1;
  // fsdp1 (_pre_backward_hook): prefetch, then wait. fsdp2
  // (FSDPParamGroup.pre_backward): wait_for_unshard, which releases this
  // unit's all-gather output, then _backward_prefetch, whose copy-in may
  // reuse that block.
  if (!fsdp2_ && next >= 0) unshard(next);
  wait_for_unshard(u);
  if (fsdp2_ && next >= 0) unshard(next);
}

void Builder::post_backward(int u) {
  if (!has_params(u)) return;
  reshard(u);
  if (p_.backward_prefetch == BackwardPrefetch::post) {
    // Only units whose backward is still to come (the root's post-backward is last).
    int next = next_unit(Phase::backward, u);
    if (next >= 0 && !backward_started_[next]) unshard(next);
  }
  if (sync_)
    reduce_grads(u);
  else
    accumulate_without_sync(u);
}

// No-sync micro-step: keep the unsharded gradient, in reduce dtype, until the
// synchronizing micro-step (FSDP1 no_sync, FSDP2 set_requires_gradient_sync(False)).
void Builder::accumulate_without_sync(int u) {
  UnitState& st = state_[u];
  if (!has_grads(st)) return;
  if (st.grad_buf >= 0 && st.grad_buf == grad_shard_[u])
    return;  // in-place DDP: accumulates into .grad
  const int64_t full = n_ * shard(u);
  if (st.accum_buf < 0)
    st.accum_buf = alloc_named(BufferRole::accum_grad, -1, -1, -1, full * br(u), compute_, u);
  // fsdp2: every parameter's gradient added at its place in the unit's layout.
  SmallVector<int, 8> srcs;
  for (int b : st.grad_pieces) srcs.push_back(b);
  if (st.grad_buf >= 0) srcs.push_back(st.grad_buf);
  srcs.push_back(st.accum_buf);
  launch_simple(OpKind::grad_accumulate, compute_, u, std::move(srcs), {},
                full * (bp(u) + 2 * br(u)), rdt(u));
  free_buf(st.grad_buf);
  free_grad_pieces(st);
  st.grad_buf = -1;
}

void Builder::flush_reduce_scatter() {
  if (outstanding_rs_ < 0) return;
  compute_waits().push_back(outstanding_rs_);
  free_buf(outstanding_rs_in_);
  outstanding_rs_ = -1;
  outstanding_rs_in_ = -1;
}

void Builder::reduce_grads(int u) {
  UnitState& st = state_[u];
  if (!has_grads(st)) return;
  const int64_t s = shard(u);
  const int64_t full = n_ * s;
  const DType rdt = this->rdt(u);
  const int b_p = bp(u), b_r = br(u);
  const bool world_one = n_ == 1 && r_ == 1;

  if (st.grad_buf >= 0 && st.grad_buf == grad_shard_[u]) {
    // In-place DDP: all-reduce the persistent gradient itself.
    if (!world_one)
      post_reduce_ops_.push_back(collective(OpKind::all_reduce, ar_, u, g_replica_, s * 4,
                                            DType::f32, {st.grad_buf}, {last_compute_}));
    st.grad_buf = -1;
    return;
  }

  int input = st.grad_buf;
  int red_stream = rs_;
  int last = -1;
  std::vector<int> grads = {st.grad_buf, st.accum_buf};
  if (fsdp2_ && n_ > 1) {
    // At most one reduce-scatter outstanding: wait for the previous one and
    // free its input before copying this unit's gradients in (compute stream).
    flush_reduce_scatter();
    int rs_in = alloc(BufferRole::rs_in, full * b_r, compute_, u);
    grads.insert(grads.begin(), st.grad_pieces.begin(), st.grad_pieces.end());
    grads.push_back(rs_in);
    last = launch_simple(OpKind::grad_cast, compute_, u, grads, {}, full * (b_p + b_r), rdt);
    free_buf(st.grad_buf);
    free_grad_pieces(st);
    free_buf(st.accum_buf);
    input = rs_in;
    const int rs_out = reduce_scatter_output(u);
    last = collective(OpKind::reduce_scatter, rs_, u, g_shard_, full * b_r, rdt, {rs_in, rs_out},
                      {last});
    outstanding_rs_ = last;
    outstanding_rs_in_ = rs_in;
    input = rs_out;
  } else {
    // fsdp1 (and DDP): the post-backward stream waits for compute, casts if the
    // reduce dtype differs, reduces; the unsharded gradient's block is only
    // reusable once the reduction has finished (record_stream).
    int wait = last_compute_;
    std::vector<int> release = {st.grad_buf, st.accum_buf};
    if (b_r != b_p || st.accum_buf >= 0) {
      int rs_in = alloc(BufferRole::rs_in, full * b_r, rs_, u);
      grads.push_back(rs_in);
      wait = launch_simple(OpKind::grad_cast, rs_, u, grads, {wait}, full * (b_p + b_r), rdt);
      input = rs_in;
    }
    last = wait;
    if (n_ > 1) {
      const int rs_out = reduce_scatter_output(u);
      last = collective(OpKind::reduce_scatter, rs_, u, g_shard_, full * b_r, rdt, {input, rs_out},
                        {wait});
      if (input != st.grad_buf) release.push_back(input);
      input = rs_out;
    }
    // DDP keeps its all-reduce buffer (`input`) until after the accumulation.
    for (int b : release)
      if (b != input) free_buf(b);
  }
  st.grad_buf = -1;
  st.accum_buf = -1;
  // Hybrid sharding / DDP: all-reduce the shard across replicas.
  if (r_ > 1) {
    last = collective(OpKind::all_reduce, ar_, u, g_replica_, s * b_r, rdt, {input}, {last});
  }
  // The reduce-scatter wrote the gradient shard itself: nothing to add.
  if (input == grad_shard_[u]) {
    post_reduce_ops_.push_back(last);
    return;
  }
  // Accumulate the reduced shard into the fp32 gradient (or copy it to the
  // host when offloading). A gradient allocated here (set_to_none) starts at
  // zero: the add is FSDP's cast to the parameter dtype (reduce dtype below
  // fp32) or DDP's copy into .grad.
  if (offload_) {
    int d2h = launch_simple(OpKind::d2h, red_stream, u, {input, grad_shard_[u]}, {last}, s * 4);
    offload_d2h_.push_back(d2h);
    post_reduce_ops_.push_back(d2h);
  } else {
    const int grad = grad_shard_for(u, red_stream);
    post_reduce_ops_.push_back(launch_simple(OpKind::grad_accumulate, red_stream, u, {input, grad},
                                             {last}, s * (b_r + 8)));
  }
  free_buf(input);
}

// Where unit u's reduce-scatter writes: with zero_grad_set_to_none and an
// fp32 reduce dtype, straight into the new gradient shard (FSDP2
// foreach_reduce's reduce_output becomes .grad; FSDP1's new_sharded_grad is
// kept as _saved_grad_shard); else a reduce-dtype rs_out on the
// reduce-scatter stream.
int Builder::reduce_scatter_output(int u) {
  if (transient_grads_ && br(u) == 4 && grad_shard_[u] < 0) return grad_shard_for(u, rs_);
  return alloc(BufferRole::rs_out, shard(u) * br(u), rs_, u);
}

}  // namespace shardscope::plan::detail
