// Internal to plan/: the step-schedule builder, split by feature across
// schedule_builder.cpp (set-up, forward/backward passes, optimizer step) and
// schedule_fsdp.cpp (unshard, reshard, prefetch, gradient reduction). This is
// the only place where FSDP's step semantics (FSDP_SEMANTICS.md sections 3-8)
// are encoded; executors replay its output without FSDP logic of their own.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "plan/activations.h"
#include "plan/error.h"
#include "plan/overrides.h"
#include "plan/schedule.h"
#include "plan/sdpa.h"

namespace shardscope::plan::detail {

// Per-unit state while the step is being generated.
struct UnitState {
  bool gathered = false;         // an unshard has been issued and not yet resharded
  int unsharded_buf = -1;        // buffer compute reads the parameters from
  int ready_op = -1;             // op compute must wait on before using the parameters
  int ag_op = -1;                // fsdp2: all-gather awaiting its copy-out
  int ag_out_buf = -1;           // fsdp2: all-gather output awaiting copy-out
  int post_fwd_buf = -1;         // fsdp2 reshard k: the 1/k slice kept after forward
  int post_fwd_op = -1;          // the reshard_copy that wrote it (the copy-in must wait for it)
  int grad_buf = -1;             // unsharded gradient of the current micro-step
  std::vector<int> grad_pieces;  // fsdp2: per-parameter unsharded gradients instead
  int accum_buf = -1;            // unsharded gradient accumulated over no-sync micro-steps
};

class Builder {
 public:
  Builder(const Graph& g, const Policy& p, const UnitPlan& up, int rank, const WorkloadSizes* sizes,
          const ActivationPlan* shared_acts)
      : g_(g), p_(p), up_(up), sizes_(sizes), shared_acts_(shared_acts), own_acts_(g), rank_(rank) {
    const World& w = up.world;
    n_ = w.shard_group_size;
    r_ = w.replicas;
    fsdp2_ = p.flavor == Flavor::fsdp2;
    us_ = unit_settings(p, up);
    offload_ = p.cpu_offload;
    transient_grads_ = p.zero_grad_set_to_none && !p.cpu_offload;
    state_.resize(up.units.size());
  }

  // persistent_only: stop before the first action (build_persistent_schedule).
  Schedule build(bool persistent_only = false);

 private:
  // ---- primitives -------------------------------------------------------
  int add_stream(StreamRole role) {
    s_.streams.push_back(stream_role_name(role));
    s_.stream_roles.push_back(role);
    stream_waits_.emplace_back();
    return static_cast<int>(s_.streams.size()) - 1;
  }

  // Element type of a buffer of `role` of unit `unit` (Buffer::dtype's rule):
  // the unit's param / reduce dtype; a tensor's, its own unit's
  // (ActivationPlan::tensor_unit).
  DType role_dtype(BufferRole role, int tensor, int unit) const {
    if (tensor >= 0 && !is_floating(g_.tensors[tensor].dtype)) return g_.tensors[tensor].dtype;
    if (tensor >= 0 && g_.tensors[tensor].precision == Precision::fp32) return DType::f32;
    // A module buffer has no producer: the root's dtype (set before acts_ is).
    if (tensor >= 0 && role != BufferRole::module_buffer) unit = acts_->tensor_unit(tensor);
    const UnitSettings& us = us_[unit >= 0 ? unit : 0];
    switch (role) {
      case BufferRole::param_shard:
      case BufferRole::grad_shard:
      case BufferRole::optimizer_state:
      case BufferRole::h2d_shard:
      case BufferRole::kernel_saved:
      case BufferRole::optimizer_temp:
        return DType::f32;
      case BufferRole::rs_in:
      case BufferRole::rs_out:
      case BufferRole::accum_grad:
        return us.reduce_dtype;
      default:
        return us.param_dtype;
    }
  }

  int new_buffer(BufferRole role, int micro, int tensor, int graph_op, int64_t bytes, int stream,
                 int unit, bool persistent) {
    Buffer b;
    b.role = role;
    b.dtype = role_dtype(role, tensor, unit);
    b.micro = micro;
    b.tensor = tensor;
    b.graph_op = graph_op;
    b.bytes = bytes;
    b.category = buffer_role_category(role);
    b.stream = stream;
    b.unit = unit;
    b.persistent = persistent;
    b.on_host = persistent && offload_;
    s_.buffers.push_back(b);
    users_.emplace_back();
    return static_cast<int>(s_.buffers.size()) - 1;
  }

  // A transient buffer "m<micro>.u<unit>.<role>" with its alloc action; -1
  // (nothing) for zero bytes.
  int alloc(BufferRole role, int64_t bytes, int stream, int unit) {
    return alloc_named(role, micro_, -1, -1, bytes, stream, unit);
  }
  // An activation buffer "m<micro>.<role>.<tensor name>".
  int alloc_tensor(BufferRole role, int tensor, int64_t bytes, int unit) {
    return alloc_named(role, micro_, tensor, -1, bytes, compute_, unit);
  }
  int alloc_named(BufferRole role, int micro, int tensor, int graph_op, int64_t bytes, int stream,
                  int unit) {
    if (bytes <= 0) return -1;
    const int id = new_buffer(role, micro, tensor, graph_op, bytes, stream, unit, false);
    Action a;
    a.kind = ActionKind::alloc;
    a.buffer = id;
    s_.actions.push_back(std::move(a));
    return id;
  }

  // A buffer "u<unit>.<role>" that exists before the step (on the host when offloading).
  int persistent(BufferRole role, int64_t bytes, int unit) {
    return bytes <= 0 ? -1 : new_buffer(role, -1, -1, -1, bytes, compute_, unit, true);
  }

  // Frees a transient buffer. Its block goes back to the pool of the stream
  // that allocated it (FSDP_SEMANTICS.md section 10); uses of it on other
  // streams must not race with the block's next owner:
  //   fsdp1 (record_stream): the free names those uses (`pending_ops`) and the
  //     block is reusable only once they have completed;
  //   fsdp2 (no record_stream): the allocating stream waits for those uses
  //     (cudaStreamWaitEvent on the consumer's event) before its next op, so
  //     the block is reusable at once; an all-gather output also makes the
  //     all-gather stream wait (_wait_all_gather_streams_on_event).
  void free_buf(int buffer) {
    if (buffer < 0) return;
    Action a;
    a.kind = ActionKind::free;
    a.buffer = buffer;
    const Buffer& b = s_.buffers[buffer];
    for (int op : users_[buffer]) {
      if (s_.ops[op].stream == b.stream) continue;
      if (!fsdp2_) {
        a.pending_ops.push_back(op);
        continue;
      }
      stream_waits_[b.stream].push_back(op);
      if (b.role == BufferRole::ag_out && ag_ >= 0 && s_.ops[op].stream != ag_)
        stream_waits_[ag_].push_back(op);
    }
    s_.actions.push_back(std::move(a));
  }

  // Drops one tensor's reference to its gradient buffer; frees the buffer
  // with its last reference (only cat / stack gradients have several:
  // grad_alias_refs_).
  void release_grad(int buffer) {
    const auto it = grad_alias_refs_.find(buffer);
    if (it != grad_alias_refs_.end()) {
      if (--it->second > 0) return;
      grad_alias_refs_.erase(it);
    }
    free_buf(buffer);
  }

  int launch(ScheduleOp op) {
    op.micro_step = micro_;
    op.phase = phase_;
    std::vector<int>& stream_waits = stream_waits_[op.stream];
    op.waits.insert(op.waits.end(), stream_waits.begin(), stream_waits.end());
    stream_waits.clear();
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

  int launch_simple(OpKind kind, int stream, int unit, SmallVector<int, 8> buffers,
                    SmallVector<int, 4> waits, int64_t bytes, DType dtype = DType::f32) {
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
                 SmallVector<int, 8> buffers, SmallVector<int, 4> waits) {
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

  std::vector<int>& compute_waits() { return stream_waits_[compute_]; }

  // ---- set-up -------------------------------------------------------------
  void setup_streams_and_groups();
  int add_group(GroupRole role, int index, std::vector<int> ranks) {
    std::string name = group_role_name(role);
    if (role != GroupRole::world) name += std::to_string(index);
    s_.groups.push_back(ProcessGroup{std::move(name), std::move(ranks), role});
    seq_.push_back(0);
    return static_cast<int>(s_.groups.size()) - 1;
  }
  void setup_persistent();
  // The gradient shard of unit u, allocated on `stream` now if the step has
  // none yet (zero_grad_set_to_none: gradients are transient).
  int grad_shard_for(int u, int stream) {
    if (grad_shard_[u] < 0 && transient_grads_)
      grad_shard_[u] = alloc(BufferRole::grad_shard, shard(u) * 4, stream, u);
    return grad_shard_[u];
  }
  void setup_checkpointing();

  // ---- FSDP ---------------------------------------------------------------
  int64_t shard(int u) const { return up_.units[u].shard_numel; }
  bool has_params(int u) const { return up_.units[u].numel > 0; }
  // DDP in full precision without offload: compute reads the persistent
  // parameters and gradients in place; nothing is gathered or staged.
  bool in_place(int u) const { return n_ == 1 && bp(u) == 4 && br(u) == 4 && !offload_; }
  // Per-unit settings (plan/overrides.h): bytes per element of the unit's
  // param and reduce dtypes, its backward all-gather degree.
  int bp(int u) const { return us_[u].param_bytes(); }
  int br(int u) const { return us_[u].reduce_bytes(); }
  DType pdt(int u) const { return us_[u].param_dtype; }
  DType rdt(int u) const { return us_[u].reduce_dtype; }
  int64_t k_of(int u) const { return us_[u].reshard_k; }
  // fsdp2 reduce-scatters: each parameter's unsharded gradient is its own
  // buffer, allocated with the first backward op producing it (Buffer::param).
  bool per_param_grads() const { return fsdp2_ && n_ > 1; }
  bool has_grads(const UnitState& st) const { return st.grad_buf >= 0 || !st.grad_pieces.empty(); }
  void free_grad_pieces(UnitState& st) {
    for (int b : st.grad_pieces) {
      param_grad_[s_.buffers[b].param] = -1;
      free_buf(b);
    }
    st.grad_pieces.clear();
  }
  void unshard(int u);
  void wait_for_unshard(int u);
  void reshard(int u);
  void post_forward(int u);
  void pre_backward(int u);
  void post_backward(int u);
  void reduce_grads(int u);
  void accumulate_without_sync(int u);
  void flush_reduce_scatter();
  int reduce_scatter_output(int u);
  int next_unit(Phase order, int u) const;  // next unit in forward/backward order

  // ---- passes ---------------------------------------------------------------
  void forward_pass();
  void backward_pass();
  void recompute_block(int block);
  void compute_op(int o, OpKind kind);
  // Allocates op o's temporaries; returns the last one, for the caller to free,
  // and appends the ones live together (fwd_live_temps_) to `live`.
  int alloc_temps(int o, OpKind kind, int unit, SmallVector<int, 8>& live);
  // The buffer each of op o's parameters' gradients is written into (in
  // op.params order), allocating what is missing; a parameter whose gradient
  // an earlier producer already holds gets a fresh piece, listed in `shared`.
  SmallVector<int, 8> ensure_grad_buffers(int o, std::vector<std::pair<int, int>>& shared);
  void sum_shared_grads(const std::vector<std::pair<int, int>>& shared);
  void optimizer_step();
  void reserve_capacity();

  const Graph& g_;
  const Policy& p_;
  const UnitPlan& up_;
  const WorkloadSizes* sizes_;               // may be null
  const ActivationPlan* shared_acts_;        // may be null; used when it matches
  ActivationPlan own_acts_;                  // built here otherwise
  const ActivationPlan* acts_ = &own_acts_;  // the one in use
  int rank_;
  Schedule s_;
  int64_t n_ = 1, r_ = 1;
  bool fsdp2_ = true;
  std::vector<UnitSettings> us_;  // per unit
  bool offload_ = false;
  // zero_grad(set_to_none=True) without offload: the gradient shards are
  // allocated by the step's reductions and freed after the optimizer.
  bool transient_grads_ = false;

  // streams
  int host_ = 0, compute_ = 1, unshard_ = -1, pre_unshard_ = -1, copy_in_ = -1, ag_ = -1, rs_ = -1,
      ar_ = -1;
  // groups of this rank
  int g_shard_ = -1, g_replica_ = -1, g_reshard_ = -1;
  std::vector<int64_t> seq_;

  std::vector<SmallVector<int, 4>> users_;  // buffer -> ops using it
  std::vector<UnitState> state_;
  std::vector<int> param_shard_, grad_shard_, opt_state_;  // per unit (persistent)
  std::vector<int> param_grad_;  // per graph parameter: its unsharded gradient piece, or -1
  std::vector<int> fwd_order_, bwd_order_;  // units with parameters
  std::vector<int> next_fwd_, next_bwd_;    // unit -> next in that order
  std::vector<bool> checkpointed_;          // per unit
  std::vector<bool> cached_;                // per graph op: per-op checkpointing cache hits
  std::vector<bool> backward_started_;      // per unit, this micro-step
  // Per stream: ops its next op waits on (cudaStreamWaitEvent before the
  // next launch there): compute waiting for unshards and reductions, fsdp2
  // frees (see free_buf). compute_waits() is the compute stream's.
  std::vector<std::vector<int>> stream_waits_;
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
  std::vector<int> module_buf_;       // per Graph::buffers entry: its persistent buffer
  std::vector<int> grad_tensor_buf_;  // activation tensor -> its gradient's buffer (-1 when none)
  // gradient buffer -> tensors whose gradient it holds, for a buffer more than
  // one shares (a cat's output gradient and its inputs' views of it)
  std::map<int, int> grad_alias_refs_;
  std::vector<int64_t> act_bytes_;        // tensor -> bytes at the workload (compute dtype)
  std::vector<int64_t> workspace_bytes_;  // graph op -> fp32 workspace bytes at the workload
  // graph op -> its temporaries' bytes, in allocation order (zero-sized left out)
  std::vector<std::vector<int64_t>> fwd_temps_, bwd_temps_;
  // graph op -> temporaries live together for the whole op, one block each,
  // freed with the last of fwd_temps_ / bwd_temps_ (the math SDPA kernel's)
  std::vector<std::vector<int64_t>> fwd_live_temps_, bwd_live_temps_;
  // SDPA kernels (plan/sdpa.h), per graph op: the math fallback (fp32) and
  // a fused kernel given repeated k and v or a mask (compute dtype) keep
  // kernel_saved_bytes_[o] (> 0) in a kernel_saved buffer from its forward
  // (or recompute) to its backward; in a checkpointed block's first forward
  // it drops them right after the op.
  std::vector<SdpaChoice> sdpa_;
  // math ops and fused ops with repeated k and v -> graph tensors they keep
  std::map<int, std::vector<int>> sdpa_saved_;
  std::vector<int64_t> kernel_saved_bytes_;  // graph op -> bytes (0: none)
  std::vector<int> kernel_saved_buf_;        // graph op -> live buffer (-1 when none)
  std::vector<bool> in_checkpointed_block_;  // graph op
};

}  // namespace shardscope::plan::detail
