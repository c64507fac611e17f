// Builds one rank's step schedule from (graph, policy, units): the only place
// where FSDP's step semantics (FSDP_SEMANTICS.md sections 3-8) are encoded.
// Executors (simulator, engine) replay the result without FSDP logic of their own.
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "plan/activations.h"
#include "plan/error.h"
#include "plan/schedule.h"

namespace shardscope::plan {
namespace {

// Per-unit state while the step is being generated.
struct UnitState {
  bool gathered = false;   // an unshard has been issued and not yet resharded
  int unsharded_buf = -1;  // buffer compute reads the parameters from
  int ready_op = -1;       // op compute must wait on before using the parameters
  int ag_op = -1;          // fsdp2: all-gather awaiting its copy-out
  int ag_out_buf = -1;     // fsdp2: all-gather output awaiting copy-out
  int post_fwd_buf = -1;   // fsdp2 reshard k: the 1/k slice kept after forward
  int grad_buf = -1;       // unsharded gradient of the current micro-step
  int accum_buf = -1;      // unsharded gradient accumulated over no-sync micro-steps
};

class Builder {
 public:
  Builder(const Graph& g, const Policy& p, const UnitPlan& up, int rank)
      : g_(g), p_(p), up_(up), acts_(g), rank_(rank) {
    const World& w = up.world;
    n_ = w.shard_group_size;
    r_ = w.replicas;
    k_ = reshard_degree(p, w);
    fsdp2_ = p.flavor == Flavor::fsdp2;
    b_p_ = dtype_bytes(p.mixed_precision.param_dtype);
    b_r_ = dtype_bytes(p.mixed_precision.reduce_dtype);
    offload_ = p.cpu_offload;
    state_.resize(up.units.size());
  }

  Schedule build();

 private:
  // ---- primitives -------------------------------------------------------
  int add_stream(StreamRole role) {
    s_.streams.push_back(stream_role_name(role));
    s_.stream_roles.push_back(role);
    return static_cast<int>(s_.streams.size()) - 1;
  }

  int new_buffer(const std::string& name, int64_t bytes, BufferCategory cat, int stream, int unit,
                 bool persistent) {
    Buffer b;
    b.name = name;
    b.bytes = bytes;
    b.category = cat;
    b.stream = stream;
    b.unit = unit;
    b.persistent = persistent;
    b.on_host = persistent && offload_;
    s_.buffers.push_back(std::move(b));
    users_.emplace_back();
    return static_cast<int>(s_.buffers.size()) - 1;
  }

  // A transient buffer with its alloc action; -1 (nothing) for zero bytes.
  int alloc(const std::string& name, int64_t bytes, BufferCategory cat, int stream, int unit) {
    if (bytes <= 0) return -1;
    const int id = new_buffer(name, bytes, cat, stream, unit, false);
    Action a;
    a.kind = ActionKind::alloc;
    a.buffer = id;
    s_.actions.push_back(std::move(a));
    return id;
  }

  // A buffer that exists before the step (on the host when offloading).
  int persistent(const std::string& name, int64_t bytes, BufferCategory cat, int unit) {
    return bytes <= 0 ? -1 : new_buffer(name, bytes, cat, compute_, unit, true);
  }

  void free_buf(int buffer) {
    if (buffer < 0) return;
    Action a;
    a.kind = ActionKind::free;
    a.buffer = buffer;
    const int stream = s_.buffers[buffer].stream;
    for (int op : users_[buffer])
      if (s_.ops[op].stream != stream) a.pending_ops.push_back(op);
    s_.actions.push_back(std::move(a));
  }

  int launch(ScheduleOp op) {
    op.micro_step = micro_;
    op.phase = phase_;
    if (op.stream == compute_) {
      op.waits.insert(op.waits.end(), compute_waits_.begin(), compute_waits_.end());
      compute_waits_.clear();
    }
    std::sort(op.waits.begin(), op.waits.end());
    op.waits.erase(std::unique(op.waits.begin(), op.waits.end()), op.waits.end());
    op.waits.erase(std::remove(op.waits.begin(), op.waits.end(), -1), op.waits.end());
    op.buffers.erase(std::remove(op.buffers.begin(), op.buffers.end(), -1), op.buffers.end());
    const int id = static_cast<int>(s_.ops.size());
    for (int b : op.buffers) users_[b].push_back(id);
    if (op.stream == compute_) last_compute_ = id;
    s_.ops.push_back(std::move(op));
    Action a;
    a.kind = ActionKind::launch;
    a.op = id;
    s_.actions.push_back(std::move(a));
    return id;
  }

  int launch_simple(OpKind kind, int stream, int unit, std::vector<int> buffers,
                    std::vector<int> waits, int64_t bytes, DType dtype = DType::f32) {
    ScheduleOp op;
    op.kind = kind;
    op.stream = stream;
    op.unit = unit;
    op.buffers = std::move(buffers);
    op.waits = std::move(waits);
    op.bytes = bytes;
    op.dtype = dtype;
    return launch(std::move(op));
  }

  int collective(OpKind kind, int stream, int unit, int group, int64_t bytes, DType dtype,
                 std::vector<int> buffers, std::vector<int> waits) {
    ScheduleOp op;
    op.kind = kind;
    op.stream = stream;
    op.unit = unit;
    op.group = group;
    op.seq = seq_[group]++;
    op.bytes = bytes;
    op.dtype = dtype;
    op.buffers = std::move(buffers);
    op.waits = std::move(waits);
    return launch(std::move(op));
  }

  void host_wait(int op) {
    if (op < 0) return;
    Action a;
    a.kind = ActionKind::host_wait;
    a.op = op;
    s_.actions.push_back(std::move(a));
  }

  std::string mname(int unit, const char* what) const {
    return "m" + std::to_string(micro_) + ".u" + std::to_string(unit) + "." + what;
  }

  // ---- set-up -------------------------------------------------------------
  void setup_streams_and_groups();
  int add_group(const std::string& name, std::vector<int> ranks) {
    s_.groups.push_back(ProcessGroup{name, std::move(ranks)});
    seq_.push_back(0);
    return static_cast<int>(s_.groups.size()) - 1;
  }
  void setup_persistent();
  void setup_checkpointing();

  // ---- FSDP ---------------------------------------------------------------
  int64_t shard(int u) const { return up_.units[u].shard_numel; }
  bool has_params(int u) const { return up_.units[u].numel > 0; }
  // DDP in full precision without offload: compute reads the persistent
  // parameters and gradients in place; nothing is gathered or staged.
  bool in_place() const { return n_ == 1 && b_p_ == 4 && b_r_ == 4 && !offload_; }
  void unshard(int u);
  void wait_for_unshard(int u);
  void reshard(int u);
  void post_forward(int u);
  void pre_backward(int u);
  void post_backward(int u);
  void reduce_grads(int u);
  void accumulate_without_sync(int u);
  void flush_reduce_scatter();
  int next_unit(Phase order, int u) const;  // next unit in forward/backward order

  // ---- passes ---------------------------------------------------------------
  void forward_pass();
  void backward_pass();
  void recompute_block(int block);
  void compute_op(int o, OpKind kind);
  void ensure_grad_buffers(int o);
  void optimizer_step();

  const Graph& g_;
  const Policy& p_;
  const UnitPlan& up_;
  ActivationPlan acts_;
  int rank_;
  Schedule s_;
  int64_t n_ = 1, r_ = 1, k_ = 1;
  bool fsdp2_ = true;
  int b_p_ = 4, b_r_ = 4;
  bool offload_ = false;

  // streams
  int host_ = 0, compute_ = 1, unshard_ = -1, pre_unshard_ = -1, copy_in_ = -1, ag_ = -1, rs_ = -1,
      ar_ = -1;
  // groups of this rank
  int g_shard_ = -1, g_replica_ = -1, g_reshard_ = -1;
  std::vector<int64_t> seq_;

  std::vector<std::vector<int>> users_;  // buffer -> ops using it
  std::vector<UnitState> state_;
  std::vector<int> param_shard_, grad_shard_, opt_state_;  // per unit (persistent)
  std::vector<int> fwd_order_, bwd_order_;                 // units with parameters
  std::vector<int> next_fwd_, next_bwd_;                   // unit -> next in that order
  std::vector<bool> checkpointed_;                         // per unit
  std::vector<bool> backward_started_;                     // per unit, this micro-step
  std::vector<int> compute_waits_;                         // attached to the next compute-stream op
  int last_compute_ = -1;
  int micro_ = 0;
  Phase phase_ = Phase::forward;
  bool sync_ = true;          // this micro-step reduces gradients
  int prev_fwd_ag_out_ = -1;  // fsdp2: kept until the next unit's copy-out
  int outstanding_rs_ = -1;   // fsdp2: the single outstanding reduce-scatter
  int outstanding_rs_in_ = -1;
  std::vector<int>
      free_queue_;  // fsdp1 limit_all_gathers: compute ops after which a unit was freed
  std::vector<int> offload_d2h_;      // d2h copies the host optimizer must wait for
  std::vector<int> post_reduce_ops_;  // last op of each unit's reduction, this micro-step
  std::vector<int> tensor_buf_;       // activation tensor -> live buffer (-1 when none)
  std::vector<int> grad_tensor_buf_;
};

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
  const int n = static_cast<int>(n_), r = static_cast<int>(r_), k = static_cast<int>(k_);
  std::vector<int> all(world);
  for (int i = 0; i < world; ++i) all[i] = i;
  add_group("world", all);
  for (int gi = 0; gi < r; ++gi) {
    std::vector<int> ranks;
    for (int i = 0; i < n; ++i) ranks.push_back(gi * n + i);
    int id = add_group("shard" + std::to_string(gi), ranks);
    if (rank_ / n == gi) g_shard_ = id;
  }
  if (r > 1) {
    for (int i = 0; i < n; ++i) {
      std::vector<int> ranks;
      for (int gi = 0; gi < r; ++gi) ranks.push_back(gi * n + i);
      int id = add_group("replica" + std::to_string(i), ranks);
      if (rank_ % n == i) g_replica_ = id;
    }
  }
  if (k > 1 && k < n) {
    for (int j = 0; j < world / k; ++j) {
      std::vector<int> ranks;
      for (int i = 0; i < k; ++i) ranks.push_back(j * k + i);
      int id = add_group("reshard" + std::to_string(j), ranks);
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
    const std::string prefix = "u" + std::to_string(u) + ".";
    param_shard_[u] = persistent(prefix + "param_shard", bytes, BufferCategory::parameters, ui);
    grad_shard_[u] = persistent(prefix + "grad_shard", bytes, BufferCategory::gradients, ui);
    opt_state_[u] =
        persistent(prefix + "optimizer_state", bytes * states, BufferCategory::optimizer_state, ui);
  }
}

// Activation checkpointing applies to "blocks": non-root units not nested in
// another non-root unit, in forward order. "full": every block; {"every": k}:
// blocks 0, k, 2k, ...
void Builder::setup_checkpointing() {
  checkpointed_.assign(up_.units.size(), false);
  if (p_.activation_checkpointing == CheckpointMode::none) return;
  std::vector<int> blocks;
  for (size_t u = 1; u < up_.units.size(); ++u)
    if (up_.units[u].parent == 0 && up_.units[u].first_op >= 0)
      blocks.push_back(static_cast<int>(u));
  if (blocks.empty())
    throw Error("policy: activation_checkpointing: needs wrapped blocks to checkpoint, but wrap." +
                std::string("type \"") + wrap_type_name(p_.wrap.type) +
                "\" yields only the root unit");
  const int64_t every =
      p_.activation_checkpointing == CheckpointMode::full ? 1 : p_.checkpoint_every;
  for (size_t j = 0; j < blocks.size(); ++j)
    if (static_cast<int64_t>(j) % every == 0) checkpointed_[blocks[j]] = true;
}

int Builder::next_unit(Phase order, int u) const {
  return order == Phase::forward ? next_fwd_[u] : next_bwd_[u];
}

// Issues the copies and the all-gather that make unit u's parameters whole.
void Builder::unshard(int u) {
  UnitState& st = state_[u];
  if (st.gathered) return;
  st.gathered = true;
  if (!has_params(u)) return;
  if (in_place()) {
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
    h2d_buf = alloc(mname(u, "h2d_shard"), s * 4, BufferCategory::comm_buffers, copy_stream, u);
    launch_simple(OpKind::h2d, copy_stream, u, {param_shard_[u], h2d_buf}, {}, s * 4);
    src = h2d_buf;
  }
  if (backward_slice) src = st.post_fwd_buf;
  const int64_t full_bytes = n_ * s * b_p_;
  const DType pdt = p_.mixed_precision.param_dtype;

  if (n_ == 1) {
    // DDP: no collective; a cast (or the device copy when offloading in fp32)
    // stands in for the unsharded parameters.
    if (b_p_ != 4) {
      int lp = alloc(mname(u, "unsharded"), full_bytes, BufferCategory::unsharded_params,
                     copy_stream, u);
      st.ready_op =
          launch_simple(OpKind::cast_params, copy_stream, u, {src, lp}, {}, s * (4 + b_p_), pdt);
      free_buf(h2d_buf);
      st.unsharded_buf = lp;
    } else {
      st.unsharded_buf = h2d_buf;
      st.ready_op = static_cast<int>(s_.ops.size()) - 1;
    }
    return;
  }

  if (fsdp2_) {
    // The all-gather input is this rank's slice of the output: one allocation.
    int out = alloc(mname(u, "ag_out"), full_bytes, BufferCategory::comm_buffers, copy_in_, u);
    const int64_t in_elems = backward_slice ? n_ * s / k_ : s;
    const int64_t src_bytes = backward_slice ? b_p_ : 4;
    int copy = launch_simple(OpKind::cast_params, copy_in_, u, {src, out}, {},
                             in_elems * (src_bytes + b_p_), pdt);
    free_buf(h2d_buf);
    if (backward_slice) {
      free_buf(st.post_fwd_buf);
      st.post_fwd_buf = -1;
    }
    st.ag_op = collective(OpKind::all_gather, ag_, u, group, full_bytes, pdt, {out}, {copy});
    st.ag_out_buf = out;
    st.ready_op = -1;
    return;
  }

  // fsdp1: cast on the pre-unshard stream, all-gather on the unshard stream.
  int input = src;
  int cast = -1;
  int lp = -1;
  if (b_p_ != 4) {
    lp = alloc(mname(u, "lowp_shard"), s * b_p_, BufferCategory::comm_buffers, pre_unshard_, u);
    cast = launch_simple(OpKind::cast_params, pre_unshard_, u, {src, lp}, {}, s * (4 + b_p_), pdt);
    input = lp;
  }
  int full =
      alloc(mname(u, "unsharded"), full_bytes, BufferCategory::unsharded_params, unshard_, u);
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
    const int64_t full_bytes = n_ * shard(u) * b_p_;
    int full =
        alloc(mname(u, "unsharded"), full_bytes, BufferCategory::unsharded_params, compute_, u);
    int copy = launch_simple(OpKind::copy_out, compute_, u, {st.ag_out_buf, full}, {st.ag_op},
                             2 * full_bytes, p_.mixed_precision.param_dtype);
    if (phase_ == Phase::forward) {
      // Keep this output until the next unit's copy-out, so the next
      // all-gather's copy-in writes elsewhere while this one is copied out.
      free_buf(prev_fwd_ag_out_);
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
  if (st.ready_op >= 0) compute_waits_.push_back(st.ready_op);
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
  if (up_.units[u].is_root || !has_params(u)) return;  // the root stays unsharded
  if (k_ == 1) return;                                 // reshard_after_forward=false
  UnitState& st = state_[u];
  if (k_ < n_) {
    // fsdp2 reshard_after_forward=k: keep this rank's 1/k slice of the whole unit.
    const int64_t slice_bytes = n_ * shard(u) * b_p_ / k_;
    int slice = alloc(mname(u, "post_fwd_slice"), slice_bytes, BufferCategory::unsharded_params,
                      compute_, u);
    launch_simple(OpKind::reshard_copy, compute_, u, {st.unsharded_buf, slice}, {}, 2 * slice_bytes,
                  p_.mixed_precision.param_dtype);
    reshard(u);
    st.post_fwd_buf = slice;
    return;
  }
  reshard(u);
}

void Builder::pre_backward(int u) {
  backward_started_[u] = true;
  unshard(u);
  if (p_.backward_prefetch == BackwardPrefetch::pre) {
    int next = next_unit(Phase::backward, u);
    if (next >= 0) unshard(next);
  }
  wait_for_unshard(u);
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
  if (st.grad_buf < 0) return;
  if (st.grad_buf == grad_shard_[u]) return;  // in-place DDP: accumulates into .grad
  const int64_t full = n_ * shard(u);
  if (st.accum_buf < 0)
    st.accum_buf = alloc("u" + std::to_string(u) + ".accum_grad", full * b_r_,
                         BufferCategory::unsharded_grads, compute_, u);
  launch_simple(OpKind::grad_accumulate, compute_, u, {st.grad_buf, st.accum_buf}, {},
                full * (b_p_ + 2 * b_r_), p_.mixed_precision.reduce_dtype);
  free_buf(st.grad_buf);
  st.grad_buf = -1;
}

void Builder::flush_reduce_scatter() {
  if (outstanding_rs_ < 0) return;
  compute_waits_.push_back(outstanding_rs_);
  free_buf(outstanding_rs_in_);
  outstanding_rs_ = -1;
  outstanding_rs_in_ = -1;
}

void Builder::reduce_grads(int u) {
  UnitState& st = state_[u];
  if (st.grad_buf < 0) return;
  const int64_t s = shard(u);
  const int64_t full = n_ * s;
  const DType rdt = p_.mixed_precision.reduce_dtype;
  const bool world_one = n_ == 1 && r_ == 1;

  if (st.grad_buf == grad_shard_[u]) {
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
    int rs_in = alloc(mname(u, "rs_in"), full * b_r_, BufferCategory::comm_buffers, compute_, u);
    grads.push_back(rs_in);
    last = launch_simple(OpKind::grad_cast, compute_, u, grads, {}, full * (b_p_ + b_r_), rdt);
    free_buf(st.grad_buf);
    free_buf(st.accum_buf);
    input = rs_in;
    int rs_out = alloc(mname(u, "rs_out"), s * b_r_, BufferCategory::comm_buffers, rs_, u);
    last = collective(OpKind::reduce_scatter, rs_, u, g_shard_, full * b_r_, rdt, {rs_in, rs_out},
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
    if (b_r_ != b_p_ || st.accum_buf >= 0) {
      int rs_in = alloc(mname(u, "rs_in"), full * b_r_, BufferCategory::comm_buffers, rs_, u);
      grads.push_back(rs_in);
      wait = launch_simple(OpKind::grad_cast, rs_, u, grads, {wait}, full * (b_p_ + b_r_), rdt);
      input = rs_in;
    }
    last = wait;
    if (n_ > 1) {
      int rs_out = alloc(mname(u, "rs_out"), s * b_r_, BufferCategory::comm_buffers, rs_, u);
      last = collective(OpKind::reduce_scatter, rs_, u, g_shard_, full * b_r_, rdt, {input, rs_out},
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
    last = collective(OpKind::all_reduce, ar_, u, g_replica_, s * b_r_, rdt, {input}, {last});
  }
  // Accumulate the reduced shard into the persistent fp32 gradient (or copy it
  // to the host when offloading).
  if (offload_) {
    int d2h = launch_simple(OpKind::d2h, red_stream, u, {input, grad_shard_[u]}, {last}, s * 4);
    offload_d2h_.push_back(d2h);
    post_reduce_ops_.push_back(d2h);
  } else {
    post_reduce_ops_.push_back(launch_simple(OpKind::grad_accumulate, red_stream, u,
                                             {input, grad_shard_[u]}, {last}, s * (b_r_ + 8)));
  }
  free_buf(input);
}

void Builder::ensure_grad_buffers(int o) {
  // Unsharded gradients of every unit whose parameters this op uses appear
  // with the first backward op that produces them.
  for (int p : g_.ops[o].params) {
    int u = up_.param_unit[p];
    UnitState& st = state_[u];
    if (st.grad_buf >= 0) continue;
    if (in_place()) {
      st.grad_buf = grad_shard_[u];
      continue;
    }
    st.grad_buf = alloc(mname(u, "unsharded_grad"), n_ * shard(u) * b_p_,
                        BufferCategory::unsharded_grads, compute_, u);
  }
}

// One graph op on the compute stream, with its activation memory actions.
void Builder::compute_op(int o, OpKind kind) {
  const Op& op = g_.ops[o];
  const Workload& w = s_.workload;
  std::vector<int> bufs;
  std::vector<int> duplicates;
  for (int p : op.params) bufs.push_back(state_[up_.param_unit[p]].unsharded_buf);
  int ws = alloc(mname(up_.op_unit[o], "workspace") + "." + op.name,
                 op.workspace_bytes.eval(w) * b_p_ / 4, BufferCategory::workspace, compute_,
                 up_.op_unit[o]);
  bufs.push_back(ws);
  if (kind == OpKind::backward) {
    ensure_grad_buffers(o);
    for (int p : op.params) bufs.push_back(state_[up_.param_unit[p]].grad_buf);
    for (int t : op.saved) bufs.push_back(tensor_buf_[t]);
    for (int t : op.outputs) bufs.push_back(grad_tensor_buf_[t]);
    for (int t : op.inputs) {
      if (!acts_.needs_grad(t)) continue;
      if (grad_tensor_buf_[t] < 0)
        grad_tensor_buf_[t] =
            alloc("m" + std::to_string(micro_) + ".grad." + g_.tensors[t].name,
                  acts_.bytes(t, w, b_p_), BufferCategory::activations, compute_, up_.op_unit[o]);
      bufs.push_back(grad_tensor_buf_[t]);
    }
  } else {
    for (int t : op.inputs) bufs.push_back(tensor_buf_[t]);
    for (int t : op.outputs) {
      const std::string prefix = kind == OpKind::recompute ? ".rc." : ".act.";
      int b = alloc("m" + std::to_string(micro_) + prefix + g_.tensors[t].name,
                    acts_.bytes(t, w, b_p_), BufferCategory::activations, compute_, up_.op_unit[o]);
      bufs.push_back(b);
      // A recompute of a tensor still kept from the first forward produces a
      // duplicate that is dropped right after the op.
      if (tensor_buf_[t] >= 0)
        duplicates.push_back(b);
      else
        tensor_buf_[t] = b;
    }
  }
  ScheduleOp sop;
  sop.kind = kind;
  sop.stream = compute_;
  sop.unit = up_.op_unit[o];
  sop.graph_op = o;
  sop.buffers = std::move(bufs);
  sop.dtype = p_.mixed_precision.param_dtype;
  launch(std::move(sop));
  free_buf(ws);
  for (int b : duplicates) free_buf(b);
  if (kind == OpKind::backward) {
    for (int t : op.outputs) {
      free_buf(grad_tensor_buf_[t]);
      grad_tensor_buf_[t] = -1;
    }
    for (int t : acts_.released_after_backward(o)) {
      free_buf(tensor_buf_[t]);
      tensor_buf_[t] = -1;
    }
  } else {
    const bool in_recompute = kind == OpKind::recompute;
    for (int t : acts_.dead_after_forward(o, in_recompute)) {
      free_buf(tensor_buf_[t]);
      tensor_buf_[t] = -1;
    }
  }
}

void Builder::forward_pass() {
  phase_ = Phase::forward;
  const Workload& w = s_.workload;
  for (int t : g_.inputs)
    tensor_buf_[t] = alloc("m" + std::to_string(micro_) + ".input." + g_.tensors[t].name,
                           acts_.bytes(t, w, b_p_), BufferCategory::activations, compute_, 0);
  for (size_t oi = 0; oi < g_.ops.size(); ++oi) {
    const int o = static_cast<int>(oi);
    for (int u : acts_.units_entering(o)) {
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
    for (int u : acts_.units_leaving(o)) post_forward(u);
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
    for (int u : acts_.units_entering(r)) {
      if (u == block) continue;
      unshard(u);
      wait_for_unshard(u);
    }
    compute_op(r, OpKind::recompute);
  }
}

void Builder::backward_pass() {
  phase_ = Phase::backward;
  for (size_t oi = g_.ops.size(); oi-- > 0;) {
    const int o = static_cast<int>(oi);
    for (int u : acts_.units_leaving(o)) {  // outer first in reverse
      pre_backward(u);
      if (checkpointed_[u]) recompute_block(u);
    }
    compute_op(o, OpKind::backward);
    std::vector<int> entering = acts_.units_entering(o);
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
    compute_waits_.insert(compute_waits_.end(), post_reduce_ops_.begin(), post_reduce_ops_.end());
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
    if (grad_shard_[u] >= 0) all_grads.push_back(grad_shard_[u]);
    total_shard += shard(static_cast<int>(u));
  }
  const int scalar_group = n_ > 1 ? g_shard_ : -1;
  if (p_.loss_scale_mode && *p_.loss_scale_mode == "dynamic") {
    // GradScaler: look for inf/nan in the shards, agree across ranks, .item().
    int chk = launch_simple(OpKind::inf_check, opt_stream, -1, all_grads, {}, total_shard * 4);
    int ar = chk;
    if (up_.world.world_size > 1)
      ar = collective(OpKind::all_reduce, compute_, -1, 0, 4, DType::f32, {}, {chk});
    host_wait(ar);
  }
  if (p_.loss_scale_mode)
    launch_simple(OpKind::grad_scale, opt_stream, -1, all_grads, {}, total_shard * 8);
  if (p_.grad_clip_norm) {
    // clip_grad_norm_: local squared norm, all-reduce of one scalar over the
    // shard group, host synchronisation, scale.
    int norm = launch_simple(OpKind::grad_norm, opt_stream, -1, all_grads, {}, total_shard * 4);
    int ar = norm;
    if (scalar_group >= 0)
      ar = collective(OpKind::all_reduce, compute_, -1, scalar_group, 4, DType::f32, {}, {norm});
    host_wait(ar);
    launch_simple(OpKind::grad_scale, opt_stream, -1, all_grads, {}, total_shard * 8);
  }
  const int states = p_.optimizer.state_tensors();
  for (int u : fwd_order_) {
    const int64_t s = shard(u);
    // reads p, g, state; writes p, state (fp32)
    launch_simple(OpKind::optimizer, opt_stream, u,
                  {param_shard_[u], grad_shard_[u], opt_state_[u]}, {}, s * 4 * (3 + 2 * states));
  }
}

Schedule Builder::build() {
  s_.rank = rank_;
  s_.world = up_.world;
  s_.workload = Workload{p_.batch_size, resolve_seq_len(p_, g_)};
  s_.grad_accum_steps = p_.grad_accum_steps;
  if (rank_ < 0 || rank_ >= up_.world.world_size)
    throw Error("rank " + std::to_string(rank_) + " is outside the world of " +
                std::to_string(up_.world.world_size));
  setup_streams_and_groups();
  setup_persistent();
  setup_checkpointing();
  acts_.set_checkpointed(up_, checkpointed_);
  for (size_t u = 0; u < up_.units.size(); ++u)
    if (has_params(static_cast<int>(u))) fwd_order_.push_back(static_cast<int>(u));
  bwd_order_ = acts_.backward_unit_order();
  bwd_order_.erase(
      std::remove_if(bwd_order_.begin(), bwd_order_.end(), [&](int u) { return !has_params(u); }),
      bwd_order_.end());
  // Successor of each unit in forward and backward order (-1: last or absent).
  next_fwd_.assign(up_.units.size(), -1);
  next_bwd_.assign(up_.units.size(), -1);
  for (size_t i = 0; i + 1 < fwd_order_.size(); ++i) next_fwd_[fwd_order_[i]] = fwd_order_[i + 1];
  for (size_t i = 0; i + 1 < bwd_order_.size(); ++i) next_bwd_[bwd_order_[i]] = bwd_order_[i + 1];
  tensor_buf_.assign(g_.tensors.size(), -1);
  grad_tensor_buf_.assign(g_.tensors.size(), -1);

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

}  // namespace

Schedule build_schedule(const Graph& graph, const Policy& policy, const UnitPlan& units, int rank) {
  Builder b(graph, policy, units, rank);
  return b.build();
}

}  // namespace shardscope::plan
