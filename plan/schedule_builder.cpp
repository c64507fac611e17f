// Step-schedule builder: set-up (streams, process groups, persistent buffers,
// checkpointed blocks), the forward and backward passes with their activation
// memory, and the optimizer step. FSDP unit mechanics are in schedule_fsdp.cpp.
#include <algorithm>
#include <string>

#include "plan/op_checkpointing.h"
#include "plan/schedule_builder.h"

namespace shardscope::plan {
namespace detail {

void Builder::setup_streams_and_groups() {
  host_ = add_stream(StreamRole::host);
  compute_ = add_stream(StreamRole::compute);
  if (fsdp2_) {
    copy_in_ = add_stream(StreamRole::ag_copy_in);
    ag_ = add_stream(StreamRole::all_gather);
  } else {
    unshard_ = add_stream(StreamRole::unshard);
    pre_unshard_ = add_stream(StreamRole::pre_unshard);
  }
  rs_ = add_stream(StreamRole::reduce_scatter);
  if (r_ > 1) ar_ = add_stream(StreamRole::all_reduce);

  const int world = static_cast<int>(up_.world.world_size);
  const int n = static_cast<int>(n_), r = static_cast<int>(r_);
  std::vector<int> all(world);
  for (int i = 0; i < world; ++i) all[i] = i;
  add_group(GroupRole::world, 0, all);
  for (int gi = 0; gi < r; ++gi) {
    std::vector<int> ranks;
    for (int i = 0; i < n; ++i) ranks.push_back(gi * n + i);
    int id = add_group(GroupRole::shard, gi, ranks);
    if (rank_ / n == gi) g_shard_ = id;
  }
  if (r > 1) {
    for (int i = 0; i < n; ++i) {
      std::vector<int> ranks;
      for (int gi = 0; gi < r; ++gi) ranks.push_back(gi * n + i);
      int id = add_group(GroupRole::replica, i, ranks);
      if (rank_ % n == i) g_replica_ = id;
    }
  }
  // reshard_after_forward = k: one partial degree 1 < k < N per schedule
  // (unit_settings refuses two), the groups of k consecutive ranks.
  int k = 1;
  for (size_t u = 0; u < up_.units.size(); ++u) {
    const int ku = static_cast<int>(k_of(static_cast<int>(u)));
    if (ku > 1 && ku < n && has_params(static_cast<int>(u))) k = ku;
  }
  if (k > 1 && k < n) {
    for (int j = 0; j < world / k; ++j) {
      std::vector<int> ranks;
      for (int i = 0; i < k; ++i) ranks.push_back(j * k + i);
      int id = add_group(GroupRole::reshard, j, ranks);
      if (rank_ / k == j) g_reshard_ = id;
    }
  }
}

void Builder::setup_persistent() {
  const size_t nu = up_.units.size();
  param_shard_.assign(nu, -1);
  grad_shard_.assign(nu, -1);
  opt_state_.assign(nu, -1);
  const int states = p_.optimizer.state_tensors();
  for (size_t u = 0; u < nu; ++u) {
    const int ui = static_cast<int>(u);
    const int64_t bytes = shard(ui) * 4;  // fp32 master shard
    param_shard_[u] = persistent(BufferRole::param_shard, bytes, ui);
    if (!transient_grads_) grad_shard_[u] = persistent(BufferRole::grad_shard, bytes, ui);
    opt_state_[u] = persistent(BufferRole::optimizer_state, bytes * states, ui);
  }
  // Module buffers (exported graphs): whole, on every rank, for the whole
  // step, on the device even when parameters are offloaded (FSDP's
  // CPUOffload moves parameters only).
  module_buf_.clear();
  const Workload w = policy_workload(p_, g_);
  for (int t : g_.buffers) {
    const Tensor& tensor = g_.tensors[static_cast<size_t>(t)];
    const int64_t per = is_floating(tensor.dtype) ? precision_bytes(tensor.precision, bp(0))
                                                  : dtype_bytes(tensor.dtype);
    const int64_t bytes = tensor.numel_at(w) * per;
    const int b = bytes <= 0
                      ? -1
                      : new_buffer(BufferRole::module_buffer, -1, t, -1, bytes, compute_, 0, true);
    if (b >= 0) s_.buffers[static_cast<size_t>(b)].on_host = false;
    module_buf_.push_back(b);
  }
}

void Builder::setup_checkpointing() {
  checkpointed_ = checkpointed_units(p_, up_);
  cached_ = cached_ops(p_, g_, up_, checkpointed_);
  sdpa_ = sdpa_kernels(g_, p_, up_);
  s_.attention_kernels.clear();
  for (const SdpaChoice& c : sdpa_) s_.attention_kernels.push_back(c.kernel);
  const int64_t seq = resolve_seq_len(p_, g_);
  for (size_t o = 0; o < g_.ops.size(); ++o) {
    if (sdpa_[o].kernel == SdpaKernel::none) continue;
    const Op& op = g_.ops[o];
    const SdpaCall call = sdpa_call(op, pdt(up_.op_unit[o]), seq);
    if (sdpa_[o].kernel != SdpaKernel::math) {
      // A fused kernel given repeat_kv's copies keeps those instead of the
      // KV-head graph tensors (plan/sdpa.h).
      if (call.kv_copied)
        sdpa_saved_[static_cast<int>(o)] = sdpa_graph_saved(op, sdpa_[o].kernel, call);
      continue;
    }
    sdpa_saved_[static_cast<int>(o)] = sdpa_graph_saved(op, SdpaKernel::math, call);
    // Per-op checkpointing policies name the fused SDPA kernels
    // (torchtitan's save list); the math fallback runs as bmm, softmax and
    // elementwise ops, which they recompute.
    if (!cached_.empty()) cached_[o] = false;
  }
}

int Builder::next_unit(Phase order, int u) const {
  return order == Phase::forward ? next_fwd_[u] : next_bwd_[u];
}

SmallVector<int, 8> Builder::ensure_grad_buffers(int o, std::vector<std::pair<int, int>>& shared) {
  // Unsharded gradients of every unit whose parameters this op uses appear
  // with the first backward op that produces them.
  SmallVector<int, 8> out;
  for (int p : g_.ops[o].params) {
    int u = up_.param_unit[p];
    UnitState& st = state_[u];
    if (per_param_grads()) {
      const int64_t bytes = g_.params[p].numel() * bp(u);
      if (param_grad_[p] >= 0) {
        // A shared (tied) parameter's later producer: autograd's InputBuffer
        // holds the earlier gradient while this op writes its own, full-size
        // one (an embedding's dense gradient); sum_shared_grads adds them.
        const int fresh = alloc(BufferRole::unsharded_grad, bytes, compute_, u);
        s_.buffers[fresh].param = p;
        shared.emplace_back(p, fresh);
        out.push_back(fresh);
        continue;
      }
      const int b = alloc(BufferRole::unsharded_grad, bytes, compute_, u);
      s_.buffers[b].param = p;
      param_grad_[p] = b;
      st.grad_pieces.push_back(b);
      out.push_back(b);
      continue;
    }
    if (st.grad_buf < 0) {
      if (in_place(u))
        st.grad_buf = grad_shard_for(u, compute_);
      else
        st.grad_buf = alloc(BufferRole::unsharded_grad, n_ * shard(u) * bp(u), compute_, u);
    }
    out.push_back(st.grad_buf);
  }
  return out;
}

// A parameter used by several ops (tied embeddings) gets one gradient per
// producer, and autograd's engine sums them in the InputBuffer of the
// parameter's AccumulateGrad node out of place: a new tensor (aten::add),
// then the earlier gradient (its buffer slot overwritten) and the later one
// (the call's output) are dropped; the sum becomes .grad. So all three are
// live at once, right after the later producer's backward has released its
// saved tensors and its output's gradient. Measured with torch 2.9.1's
// profiler memory events, plain autograd and FSDP2 alike, lm_head's
// gradient first (an mm output), the embedding's dense one second: the
// in-place path of input_buffer.cpp (a tensor owning its storage alone) is
// not taken, with or without grad mode. Sizes: the parameter's elements in
// its unit's param dtype, each.
void Builder::sum_shared_grads(const std::vector<std::pair<int, int>>& shared) {
  for (const auto& [p, fresh] : shared) {
    const int u = up_.param_unit[p];
    UnitState& st = state_[u];
    const int earlier = param_grad_[p];
    const int64_t bytes = s_.buffers[earlier].bytes;
    const int sum = alloc(BufferRole::unsharded_grad, bytes, compute_, u);
    s_.buffers[sum].param = p;
    // Reads two gradients, writes their sum: 3 x the parameter's bytes.
    launch_simple(OpKind::grad_accumulate, compute_, u, {earlier, fresh, sum}, {}, 3 * bytes,
                  pdt(u));
    free_buf(earlier);
    free_buf(fresh);
    std::replace(st.grad_pieces.begin(), st.grad_pieces.end(), earlier, sum);
    param_grad_[p] = sum;
  }
}

// The op's temporaries (Op::fwd_temps / bwd_temps), each its own block in
// list order, as autograd allocates them one by one: each is freed once the
// next one exists, the last once the op's results exist (`last` is returned
// for that; -1 if none). The loss, bf16 (an fp32 nll gradient A, log_softmax's
// fp32 gradient B, the bf16 logits gradient C): alloc A, alloc B, free A,
// alloc C, free B; in fp32 B is the result: alloc A, alloc C, free A. This
// order decides which cached blocks and segments PyTorch's allocator uses
// (docs/schedule.md); the live bytes at every moment equal one block of all
// temporaries followed by the results.
int Builder::alloc_temps(int o, OpKind kind, int unit, SmallVector<int, 8>& live) {
  const std::vector<int64_t>& temps = kind == OpKind::backward ? bwd_temps_[o] : fwd_temps_[o];
  int last = -1;
  for (int64_t bytes : temps) {
    const int b = alloc_named(BufferRole::workspace, micro_, -1, o, bytes, compute_, unit);
    if (b < 0) continue;
    free_buf(last);
    last = b;
  }
  // A composite kernel's tensors (math SDPA: scores, probabilities, ...),
  // each its own block, all live until the op's results exist.
  for (int64_t bytes : kind == OpKind::backward ? bwd_live_temps_[o] : fwd_live_temps_[o]) {
    const int b = alloc_named(BufferRole::workspace, micro_, -1, o, bytes, compute_, unit);
    if (b >= 0) live.push_back(b);
  }
  return last;
}

// One graph op on the compute stream, with its activation memory actions.
void Builder::compute_op(int o, OpKind kind) {
  const Op& op = g_.ops[o];
  SmallVector<int, 8> bufs;
  std::vector<int> duplicates;
  for (int p : op.params) bufs.push_back(state_[up_.param_unit[p]].unsharded_buf);
  // The op computes in its unit's dtype (plan/overrides.h).
  const int ou = up_.op_unit[o];
  // Scratch (Op::workspace_bytes) for the whole op, then the temporaries.
  int ws = alloc_named(BufferRole::workspace, micro_, -1, o, workspace_bytes_[o] * bp(ou) / 4,
                       compute_, ou);
  bufs.push_back(ws);
  SmallVector<int, 8> live_temps;
  const int last_temp = alloc_temps(o, kind, ou, live_temps);
  std::vector<std::pair<int, int>> shared;  // (parameter, this op's own gradient of it)
  // (tensor, the view of a cat's gradient it held before this op's sum replaced it)
  std::vector<std::pair<int, int>> views_summed;
  if (kind == OpKind::backward) {
    for (int b : ensure_grad_buffers(o, shared)) bufs.push_back(b);
    for (int t : acts_->saved(o)) bufs.push_back(tensor_buf_[t]);
    bufs.push_back(kernel_saved_buf_[o]);
    for (int t : op.outputs) bufs.push_back(grad_tensor_buf_[t]);
    // cat / stack: each input's gradient is a view of the output's (no new
    // buffer); the output's gradient buffer lives until its last view is summed
    // or consumed (release_grad).
    const int out_grad =
        backward_returns_views_of_output_grad(op) ? grad_tensor_buf_[op.outputs[0]] : -1;
    for (int t : op.inputs) {
      if (!acts_->needs_grad(t)) continue;
      if (grad_tensor_buf_[t] < 0 && out_grad >= 0) {
        grad_alias_refs_.emplace(out_grad, 1);  // the output's own reference
        ++grad_alias_refs_[out_grad];
        grad_tensor_buf_[t] = out_grad;
        continue;  // already in bufs
      }
      if (grad_tensor_buf_[t] < 0) {
        grad_tensor_buf_[t] =
            alloc_tensor(BufferRole::activation_grad, t, act_bytes_[t], up_.op_unit[o]);
      } else if (grad_alias_refs_.count(grad_tensor_buf_[t]) != 0) {
        // The pending gradient is a view, not dense: autograd's InputBuffer sums
        // out of place into a new tensor, then drops the view (after the op).
        views_summed.emplace_back(t, grad_tensor_buf_[t]);
        grad_tensor_buf_[t] =
            alloc_tensor(BufferRole::activation_grad, t, act_bytes_[t], up_.op_unit[o]);
      }
      bufs.push_back(grad_tensor_buf_[t]);
    }
  } else {
    for (int t : op.inputs) bufs.push_back(tensor_buf_[t]);
    for (int t : op.outputs) {
      int b =
          alloc_tensor(kind == OpKind::recompute ? BufferRole::recomputed : BufferRole::activation,
                       t, act_bytes_[t], up_.op_unit[o]);
      bufs.push_back(b);
      // A recompute of a tensor still kept from the first forward produces a
      // duplicate that is dropped right after the op.
      if (tensor_buf_[t] >= 0)
        duplicates.push_back(b);
      else
        tensor_buf_[t] = b;
    }
    if (kernel_saved_bytes_[o] > 0) {
      const int b = alloc_named(BufferRole::kernel_saved, micro_, -1, o, kernel_saved_bytes_[o],
                                compute_, ou);
      // The math fallback keeps fp32; a fused kernel its compute dtype.
      if (b >= 0 && sdpa_[static_cast<size_t>(o)].kernel != SdpaKernel::math)
        s_.buffers[static_cast<size_t>(b)].dtype = pdt(ou);
      bufs.push_back(b);
      // A checkpointed block's first forward keeps nothing for backward,
      // except for an op per-op checkpointing caches (it does not run again).
      if (kind == OpKind::forward && in_checkpointed_block_[o] && !acts_->cached(o))
        duplicates.push_back(b);
      else
        kernel_saved_buf_[o] = b;
    }
  }
  free_buf(last_temp);
  for (int b : live_temps) free_buf(b);
  ScheduleOp sop;
  sop.kind = kind;
  sop.stream = compute_;
  sop.unit = up_.op_unit[o];
  sop.graph_op = o;
  sop.buffers = std::move(bufs);
  sop.dtype = pdt(ou);
  launch(std::move(sop));
  free_buf(ws);
  for (int b : duplicates) free_buf(b);
  if (kind == OpKind::backward) {
    for (int t : op.outputs) {
      release_grad(grad_tensor_buf_[t]);
      grad_tensor_buf_[t] = -1;
    }
    for (const auto& [t, view_of] : views_summed) release_grad(view_of);
    for (int t : acts_->released_after_backward(o)) {
      free_buf(tensor_buf_[t]);
      tensor_buf_[t] = -1;
    }
    free_buf(kernel_saved_buf_[o]);
    kernel_saved_buf_[o] = -1;
    sum_shared_grads(shared);
  } else {
    const bool in_recompute = kind == OpKind::recompute;
    for (int t : acts_->dead_after_forward(o, in_recompute)) {
      free_buf(tensor_buf_[t]);
      tensor_buf_[t] = -1;
    }
  }
}

void Builder::forward_pass() {
  phase_ = Phase::forward;
  for (int t : g_.inputs) tensor_buf_[t] = alloc_tensor(BufferRole::input, t, act_bytes_[t], 0);
  for (size_t oi = 0; oi < g_.ops.size(); ++oi) {
    const int o = static_cast<int>(oi);
    for (int u : acts_->units_entering(o)) {
      unshard(u);
      if (p_.forward_prefetch > 0) {
        // fsdp1 forward_prefetch / fsdp2 explicit prefetch list of depth k.
        int next = u;
        for (int64_t d = 0; d < p_.forward_prefetch; ++d) {
          next = next_unit(Phase::forward, next);
          if (next < 0) break;
          unshard(next);
        }
      }
      wait_for_unshard(u);
    }
    compute_op(o, OpKind::forward);
    for (int u : acts_->units_leaving(o)) post_forward(u);
  }
  // The root frees the last all-gather output at the end of forward.
  free_buf(prev_fwd_ag_out_);
  prev_fwd_ag_out_ = -1;
}

// Activation checkpointing: run the block's forward again before its backward.
// Units nested in the block are unsharded by their pre-forward hooks during
// the recompute and stay unsharded until their own post-backward.
void Builder::recompute_block(int block) {
  const Unit& unit = up_.units[block];
  for (int r = unit.first_op; r <= unit.last_op; ++r) {
    for (int u : acts_->units_entering(r)) {
      if (u == block) continue;
      unshard(u);
      wait_for_unshard(u);
    }
    if (acts_->cached(r)) {
      // Per-op checkpointing: a cache hit, nothing runs; the forward outputs
      // it hands out die by the recompute rule (ActivationPlan).
      for (int t : acts_->dead_after_forward(r, true)) {
        free_buf(tensor_buf_[t]);
        tensor_buf_[t] = -1;
      }
      continue;
    }
    compute_op(r, OpKind::recompute);
  }
}

void Builder::backward_pass() {
  phase_ = Phase::backward;
  for (size_t oi = g_.ops.size(); oi-- > 0;) {
    const int o = static_cast<int>(oi);
    for (int u : acts_->units_leaving(o)) {  // outer first in reverse
      pre_backward(u);
      if (checkpointed_[u]) recompute_block(u);
    }
    compute_op(o, OpKind::backward);
    std::vector<int> entering = acts_->units_entering(o);
    std::reverse(entering.begin(), entering.end());  // inner first
    for (int u : entering) post_backward(u);
  }
  for (int t : g_.inputs) {
    free_buf(tensor_buf_[t]);
    tensor_buf_[t] = -1;
  }
  if (sync_) {
    // The final backward callback: compute waits for every reduction and
    // gradient accumulation before the optimizer reads the gradient shards.
    flush_reduce_scatter();
    compute_waits().insert(compute_waits().end(), post_reduce_ops_.begin(), post_reduce_ops_.end());
    post_reduce_ops_.clear();
  }
}

void Builder::optimizer_step() {
  phase_ = Phase::optimizer;
  micro_ = static_cast<int>(p_.grad_accum_steps) - 1;
  const int opt_stream = offload_ ? host_ : compute_;
  // The host optimizer reads gradients copied to the host: wait for the copies.
  if (offload_)
    for (int d : offload_d2h_) host_wait(d);
  std::vector<int> all_grads;
  int64_t total_shard = 0;
  for (size_t u = 0; u < up_.units.size(); ++u) {
    const int ui = static_cast<int>(u);
    if (grad_shard_[u] >= 0) all_grads.push_back(grad_shard_[u]);
    if (grad_shard_[u] < 0 && has_params(ui))
      throw Error("unit " + up_.units[u].name +
                  " has parameters but no gradient at the optimizer step");
    total_shard += shard(ui);
  }
  const int scalar_group = n_ > 1 ? g_shard_ : -1;
  if (p_.loss_scale_mode && *p_.loss_scale_mode == "dynamic") {
    // GradScaler: look for inf/nan in the shards, agree across ranks, .item().
    int chk = launch_simple(OpKind::inf_check, opt_stream, -1, all_grads, {}, total_shard * 4);
    int ar = chk;
    if (up_.world.world_size > 1) {
      ar = collective(OpKind::all_reduce, compute_, -1, 0, 4, DType::f32, {}, {chk});
      s_.ops[ar].purpose = OpPurpose::inf_flag;
    }
    host_wait(ar);
  }
  if (p_.loss_scale_mode) {
    int unscale = launch_simple(OpKind::grad_scale, opt_stream, -1, all_grads, {}, total_shard * 8);
    s_.ops[unscale].purpose = OpPurpose::unscale;
  }
  if (p_.grad_clip_norm) {
    // clip_grad_norm_: local squared norm, all-reduce of one scalar over the
    // shard group, host synchronisation, scale.
    int norm = launch_simple(OpKind::grad_norm, opt_stream, -1, all_grads, {}, total_shard * 4);
    int ar = norm;
    if (scalar_group >= 0) {
      ar = collective(OpKind::all_reduce, compute_, -1, scalar_group, 4, DType::f32, {}, {norm});
      s_.ops[ar].purpose = OpPurpose::norm_sq;
    }
    host_wait(ar);
    int clip = launch_simple(OpKind::grad_scale, opt_stream, -1, all_grads, {}, total_shard * 8);
    s_.ops[clip].purpose = OpPurpose::clip;
  }
  // FSDP2's parameters are one sharded tensor each, and foreach AdamW
  // (torch/optim/adam.py, _multi_tensor_adam, not capturable) allocates
  // exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs): one fp32 tensor of
  // each parameter's shard, in parameter order, live until the step returns
  // (the H200 snapshots: the step's last allocations, one per parameter,
  // sub-MiB blocks of the small pool on small models). Shard sizes are rank
  // 0's (the padded ceil(dim0 / N) rows of every parameter). Not modelled:
  // fsdp1 (use_orig_params: each rank's slices of the flat shard), SGD's
  // weight-decay temporaries, the host optimizer of cpu_offload.
  std::vector<int> opt_temps;
  if (fsdp2_ && !offload_ && p_.optimizer.type == OptimizerType::adamw)
    for (size_t p = 0; p < g_.params.size(); ++p) {
      const int u = up_.param_unit[p];
      if (u < 0) continue;
      const int b = alloc(BufferRole::optimizer_temp, fsdp2_shard_numel(g_.params[p].shape, n_) * 4,
                          opt_stream, u);
      if (b < 0) continue;
      s_.buffers[static_cast<size_t>(b)].param = static_cast<int>(p);
      opt_temps.push_back(b);
    }
  const int states = p_.optimizer.state_tensors();
  for (int u : fwd_order_) {
    const int64_t s = shard(u);
    // reads p, g, state; writes p, state (fp32)
    launch_simple(OpKind::optimizer, opt_stream, u,
                  {param_shard_[u], grad_shard_[u], opt_state_[u]}, {}, s * 4 * (3 + 2 * states));
  }
  for (int b : opt_temps) free_buf(b);
  // optimizer.zero_grad(set_to_none=True): the gradients are dropped.
  if (transient_grads_)
    for (int u : fwd_order_) {
      free_buf(grad_shard_[u]);
      grad_shard_[u] = -1;
    }
}

// Capacity for the schedule's vectors from the graph's size, generous so that
// building never reallocates them (measured on llama3-8b: ops 2.8x the graph
// ops without checkpointing, 3.8x with; actions 8.3x / 11.8x; buffers 3x /
// 4.2x). Untouched capacity costs address space, not memory.
void Builder::reserve_capacity() {
  const size_t passes = static_cast<size_t>(p_.grad_accum_steps) *
                        (p_.activation_checkpointing == CheckpointMode::none ? 2 : 3);
  const size_t per_op = g_.ops.size() * passes;
  const size_t per_unit = up_.units.size() * static_cast<size_t>(p_.grad_accum_steps) * 16;
  s_.ops.reserve(2 * per_op + per_unit);
  s_.actions.reserve(5 * per_op + 4 * per_unit);
  s_.buffers.reserve(3 * per_op + per_unit);
  users_.reserve(3 * per_op + per_unit);
}

Schedule Builder::build(bool persistent_only) {
  s_.rank = rank_;
  s_.world = up_.world;
  s_.workload = policy_workload(p_, g_);
  s_.grad_accum_steps = p_.grad_accum_steps;
  s_.expandable_segments = p_.expandable_segments;
  if (rank_ < 0 || rank_ >= up_.world.world_size)
    throw Error("rank " + std::to_string(rank_) + " is outside the world of " +
                std::to_string(up_.world.world_size));
  setup_streams_and_groups();
  setup_persistent();
  setup_checkpointing();
  if (persistent_only) return std::move(s_);
  if (shared_acts_ && shared_acts_->units() == &up_ &&
      shared_acts_->checkpointed() == checkpointed_ && shared_acts_->cached() == cached_ &&
      shared_acts_->saved_overrides() == sdpa_saved_) {
    acts_ = shared_acts_;
  } else {
    own_acts_.set_checkpointed(up_, checkpointed_, cached_, sdpa_saved_);
    acts_ = &own_acts_;
  }
  for (size_t u = 0; u < up_.units.size(); ++u)
    if (has_params(static_cast<int>(u))) fwd_order_.push_back(static_cast<int>(u));
  bwd_order_ = acts_->backward_unit_order();
  bwd_order_.erase(
      std::remove_if(bwd_order_.begin(), bwd_order_.end(), [&](int u) { return !has_params(u); }),
      bwd_order_.end());
  // Successor of each unit in forward and backward order (-1: last or absent).
  next_fwd_.assign(up_.units.size(), -1);
  next_bwd_.assign(up_.units.size(), -1);
  for (size_t i = 0; i + 1 < fwd_order_.size(); ++i) next_fwd_[fwd_order_[i]] = fwd_order_[i + 1];
  for (size_t i = 0; i + 1 < bwd_order_.size(); ++i) next_bwd_[bwd_order_[i]] = bwd_order_[i + 1];
  tensor_buf_.assign(g_.tensors.size(), -1);
  for (size_t i = 0; i < g_.buffers.size(); ++i)
    tensor_buf_[static_cast<size_t>(g_.buffers[i])] = module_buf_[i];
  param_grad_.assign(g_.params.size(), -1);
  grad_tensor_buf_.assign(g_.tensors.size(), -1);
  // Sizes at this workload, evaluated once: every micro-step, recompute and
  // gradient reuses them.
  WorkloadSizes own;
  const WorkloadSizes* sizes = sizes_;
  if (!sizes || !sizes->matches(g_, s_.workload)) {
    own = workload_sizes(g_, s_.workload);
    sizes = &own;
  }
  act_bytes_.resize(g_.tensors.size());
  for (size_t t = 0; t < g_.tensors.size(); ++t)
    act_bytes_[t] = acts_->bytes_of(static_cast<int>(t), sizes->tensor_numel[t],
                                    bp(acts_->tensor_unit(static_cast<int>(t))));
  workspace_bytes_ = sizes->workspace_bytes;
  fwd_temps_.assign(g_.ops.size(), {});
  bwd_temps_.assign(g_.ops.size(), {});
  fwd_live_temps_.assign(g_.ops.size(), {});
  bwd_live_temps_.assign(g_.ops.size(), {});
  for (size_t o = 0; o < g_.ops.size(); ++o) {
    const int ou = up_.op_unit[o];
    for (auto [temps, out] : {std::pair{&g_.ops[o].fwd_temps, &fwd_temps_[o]},
                              std::pair{&g_.ops[o].bwd_temps, &bwd_temps_[o]}})
      for (const Temp& t : *temps) {
        const int64_t bytes = t.numel.eval(s_.workload) * precision_bytes(t.precision, bp(ou));
        if (bytes > 0) out->push_back(bytes);
      }
  }
  // The math SDPA fallback: its own saved tensors and temporaries; no
  // log-sum-exp (the attention op's fp32 output).
  kernel_saved_bytes_.assign(g_.ops.size(), 0);
  kernel_saved_buf_.assign(g_.ops.size(), -1);
  in_checkpointed_block_.assign(g_.ops.size(), false);
  for (size_t u = 0; u < up_.units.size(); ++u)
    for (int o = up_.units[u].first_op; checkpointed_[u] && o >= 0 && o <= up_.units[u].last_op;
         ++o)
      in_checkpointed_block_[static_cast<size_t>(o)] = true;
  for (size_t o = 0; o < g_.ops.size(); ++o) {
    // A fused kernel: repeat_kv's k and v copies and the explicit mask, in
    // the compute dtype (plan/sdpa.h FusedSdpaBytes).
    if (sdpa_[o].kernel == SdpaKernel::none || sdpa_[o].kernel == SdpaKernel::math) continue;
    const int ou = up_.op_unit[o];
    kernel_saved_bytes_[o] =
        fused_sdpa_bytes(sdpa_call(g_.ops[o], pdt(ou), s_.workload.seq), s_.workload.batch, bp(ou))
            .saved();
  }
  for (const auto& [o, saved] : sdpa_saved_) {
    if (sdpa_[static_cast<size_t>(o)].kernel != SdpaKernel::math) continue;
    const Op& op = g_.ops[static_cast<size_t>(o)];
    const int ou = up_.op_unit[static_cast<size_t>(o)];
    const MathSdpaBytes m =
        math_sdpa_bytes(sdpa_call(op, pdt(ou), s_.workload.seq), s_.workload.batch, bp(ou));
    kernel_saved_bytes_[static_cast<size_t>(o)] = m.saved;
    // One block per tensor, live together (a fused attention op has no
    // temporaries of its own): PyTorch allocates them one by one.
    for (int64_t b : m.forward_pieces)
      if (b > 0) fwd_live_temps_[static_cast<size_t>(o)].push_back(b);
    for (int64_t b : m.backward_pieces)
      if (b > 0) bwd_live_temps_[static_cast<size_t>(o)].push_back(b);
    for (int t : op.outputs)
      if (g_.tensors[static_cast<size_t>(t)].precision == Precision::fp32)
        act_bytes_[static_cast<size_t>(t)] = 0;  // the log-sum-exp
  }
  reserve_capacity();

  for (int64_t m = 0; m < p_.grad_accum_steps; ++m) {
    micro_ = static_cast<int>(m);
    sync_ = m + 1 == p_.grad_accum_steps;
    backward_started_.assign(up_.units.size(), false);
    forward_pass();
    backward_pass();
    // After backward every unit, the root included, is sharded again.
    for (size_t u = 0; u < up_.units.size(); ++u) reshard(static_cast<int>(u));
  }
  optimizer_step();
  return std::move(s_);
}

}  // namespace detail

Schedule build_schedule(const Graph& graph, const Policy& policy, const UnitPlan& units, int rank,
                        const WorkloadSizes* sizes, const ActivationPlan* acts) {
  detail::Builder b(graph, policy, units, rank, sizes, acts);
  return b.build();
}

Schedule build_persistent_schedule(const Graph& graph, const Policy& policy, const UnitPlan& units,
                                   int rank) {
  detail::Builder b(graph, policy, units, rank, nullptr, nullptr);
  return b.build(true);
}

}  // namespace shardscope::plan
