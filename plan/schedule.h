// The per-rank step schedule (ARCHITECTURE.md "The step schedule";
// docs/schedule.md has the schema and a worked example). One training step:
// every micro-step's forward and backward, then the optimizer step.
//
// The schedule is a list of *actions in host issue order*:
//   launch    an op on a stream (the host does not wait for it);
//   alloc     a named buffer of N bytes on a stream's memory pool;
//   free      that buffer; it becomes reusable for its pool once the ops on
//             other streams that used it (`pending_ops`) have completed
//             (PyTorch's record_stream semantics); `allocated` drops at once;
//   host_wait the host blocks until an op has completed (fsdp1's rate limiter,
//             the clip-norm / inf-check .item(), offload waits).
// Ops on one stream run in launch order; an op also waits for the ops in
// `waits` (cudaStreamWaitEvent). Collectives on one process group run one at
// a time in sequence-number order, whatever stream issued them.
//
// Sizes are bytes; collective `bytes` is the full (unsharded) buffer S of the
// collective: all-gather output, reduce-scatter input, all-reduce buffer. Wire
// bytes per rank follow nccl-tests: (n-1)/n * S for all-gather and
// reduce-scatter, 2(n-1)/n * S for all-reduce.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/activations.h"
#include "plan/graph.h"
#include "plan/policy.h"
#include "plan/small_vector.h"
#include "plan/units.h"
#include "plan/workload_sizes.h"

namespace shardscope::plan {

enum class StreamRole : uint8_t {
  host,            // the CPU thread issuing work; host ops (offloaded optimizer) run here
  compute,         // default stream: forward, backward, fsdp2 copy-out and RS copy-in
  unshard,         // fsdp1: all-gather
  pre_unshard,     // fsdp1: casts to param dtype, host-to-device copies of offloaded shards
  ag_copy_in,      // fsdp2: all-gather copy-in (cast into the all-gather buffer), h2d
  all_gather,      // fsdp2: all-gather
  reduce_scatter,  // both: reduce-scatter (fsdp1's post-backward stream), grad accumulation, d2h
  all_reduce,      // hybrid sharding and DDP: all-reduce across replicas
};
const char* stream_role_name(StreamRole role);

enum class OpKind : uint8_t {
  forward,          // graph op forward (compute)
  backward,         // graph op backward (compute)
  recompute,        // graph op forward again under activation checkpointing
  cast_params,      // fp32 shard -> param-dtype shard (fsdp1 pre-unshard, fsdp2 copy-in)
  copy_out,         // fsdp2: all-gather output -> per-parameter unsharded storage
  reshard_copy,     // fsdp2 reshard_after_forward=k: keep a 1/k slice after forward
  all_gather,       // collective
  reduce_scatter,   // collective
  all_reduce,       // collective
  grad_cast,        // unsharded grads -> reduce-dtype padded buffer (RS input)
  grad_accumulate,  // reduced shard (or unsharded grads without sync) added into the accumulator
  grad_norm,        // local squared norm of the gradient shards (clipping)
  grad_scale,       // multiply gradient shards by the clip coefficient / unscale
  inf_check,        // fp16 dynamic loss scaling: look for inf/nan in the shards
  optimizer,        // optimizer update of one unit's shards
  h2d,              // host -> device copy (offload)
  d2h,              // device -> host copy (offload)
};
const char* op_kind_name(OpKind kind);
bool is_collective(OpKind kind);
bool is_compute(
    OpKind kind);  // runs kernels that compete for SMs (everything but copies/collectives)

enum class Phase : uint8_t { forward, backward, optimizer };
const char* phase_name(Phase phase);

enum class BufferCategory : uint8_t {
  parameters,        // sharded fp32 parameters (persistent)
  gradients,         // sharded fp32 gradients (persistent)
  optimizer_state,   // optimizer state (persistent)
  unsharded_params,  // all-gathered parameters in param dtype (transient)
  unsharded_grads,   // unsharded gradients in compute/reduce dtype (transient)
  comm_buffers,      // all-gather / reduce-scatter staging buffers (transient)
  activations,       // activations and their gradients (transient)
  workspace,         // op scratch (transient)
};
const char* buffer_category_name(BufferCategory c);

// What a process group is for. Every rank belongs to exactly one group of
// each role the schedule has; executors find their groups by role, never by
// name (names are for I/O only).
enum class GroupRole : uint8_t {
  world,    // every rank (group 0): broadcasts, the inf-check all-reduce
  shard,    // the ranks one unit is sharded over: all-gather, reduce-scatter, the norm all-reduce
  replica,  // hybrid sharding / DDP: the ranks holding the same shard: gradient all-reduce
  reshard,  // fsdp2 reshard_after_forward=k: the ranks the backward all-gather spans
};
const char* group_role_name(GroupRole role);  // "world", "shard", "replica", "reshard"

struct ProcessGroup {
  std::string name;        // "shard0", "replica1", "world", "reshard0" ...: <role><index>
  std::vector<int> ranks;  // global ranks, ascending
  GroupRole role = GroupRole::world;
};

// What a buffer holds, the typed contract between plan/ and the executors:
// an executor finds an op's operands, how it initialises a buffer and how it
// moves data from the roles alone (docs/engine.md lists what each role asks
// of an executor). Each role has one category and one dtype rule
// (check_schedule verifies both); its name is the <what> part of buffer_name.
enum class BufferRole : uint8_t {
  param_shard,      // persistent fp32 parameter shard of a unit ("param_shard")
  grad_shard,       // fp32 gradient shard ("grad_shard"): persistent and zeroed by zero_grad, or
                    // (zero_grad_set_to_none) allocated by the step's reduction, freed after
                    // the optimizer; ops add into it
  optimizer_state,  // persistent fp32 optimizer state of the shard, state tensors back to back
  h2d_shard,        // cpu_offload: fp32 copy of the host shard on the device ("h2d_shard")
  lowp_shard,       // fsdp1 mixed precision: the shard cast to the param dtype ("lowp_shard")
  ag_out,           // fsdp2: all-gather output in the gathered layout, param dtype ("ag_out")
  unsharded,        // unsharded parameters compute reads, param dtype ("unsharded")
  post_fwd_slice,   // fsdp2 reshard_after_forward=k: this rank's 1/k kept after forward
  unsharded_grad,   // unsharded gradients of one micro-step, param dtype; ops add into it
  accum_grad,       // no-sync accumulator of unsharded gradients, reduce dtype; ops add into it
  rs_in,            // reduce-scatter input, gathered layout, reduce dtype
  rs_out,           // reduce-scatter output: the reduced shard, reduce dtype
  input,            // a graph input (token ids, labels, features) filled from the data
  activation,       // a graph tensor produced by forward ("act")
  recomputed,       // a graph tensor produced again by recompute ("rc")
  activation_grad,  // the gradient of a graph tensor; ops add into it ("grad")
  workspace,        // scratch of one graph op, param dtype ("workspace")
  kernel_saved,     // what one graph op's kernel keeps for backward that is no graph tensor:
                    // the math SDPA fallback's scaled q and k, probabilities and expanded v
                    // (fp32), a fused SDPA kernel's repeated k and v and explicit mask (the
                    // op's compute dtype) (plan/sdpa.h); names the op ("kernel_saved")
  module_buffer,    // a module buffer of an exported graph (Graph::buffers): persistent,
                    // unsharded, on every rank, in its tensor's dtype; names the tensor
                    // ("module_buffer"); counted with the parameters
  optimizer_temp,   // fsdp2, foreach AdamW: exp_avg_sq_sqrt of one parameter's shard (fp32),
                    // live through the optimizer step; names the parameter
                    // ("optimizer_temp"); no op reads it (it holds the memory PyTorch holds)
};
const char* buffer_role_name(BufferRole role);  // the <what> of buffer_name
BufferCategory buffer_role_category(BufferRole role);
// Ops add into buffers of this role: their first user after each allocation
// zeroes them (persistent ones are zeroed by the executor's zero_grad).
bool accumulates(BufferRole role);

// A buffer's name is kept as parts (building strings for thousands of
// buffers per schedule dominated planning); buffer_name() spells it out (not
// unique: a unit gathered for forward and again for backward has two
// "m0.u3.ag_out"):
//   tensor >= 0:    "m<micro>.<what>.<tensor name>"      m0.act.h.3.mlp.out, m1.grad.x
//   graph_op >= 0:  "m<micro>.u<unit>.workspace.<op name>"
//   param >= 0:     "m<micro>.u<unit>.unsharded_grad.<param name>"
//   micro >= 0:     "m<micro>.u<unit>.<what>"             m0.u3.unsharded
//   otherwise:      "u<unit>.<what>"                      u3.param_shard
// ("u<unit>." is left out for unit < 0; <what> is buffer_role_name(role).)
struct Buffer {
  BufferRole role = BufferRole::activation;
  // Element type: integer graph tensors keep theirs; persistent shards and
  // offload staging are fp32; rs_in, rs_out and accum_grad take the policy's
  // reduce dtype; everything else its param dtype (the compute dtype).
  DType dtype = DType::f32;
  int micro = -1;     // micro-step of a transient buffer; -1: none in the name
  int tensor = -1;    // activation buffers: the graph tensor (or its gradient)
  int graph_op = -1;  // workspace buffers: the graph op
  // unsharded_grad buffers: the one parameter whose gradient this buffer
  // holds, `numel` elements in its own shape (fsdp2: autograd gives each
  // parameter its own .grad when its first producer's backward runs); -1:
  // the whole unit's unsharded layout (fsdp1's FlatParameter gradient).
  int param = -1;
  int64_t bytes = 0;
  BufferCategory category = BufferCategory::activations;
  int stream = 0;  // index into Schedule::streams: the pool it comes from
  int unit = -1;
  bool persistent = false;  // lives across steps (allocated before the step, never freed in it)
  bool on_host = false;     // host memory (cpu_offload): not counted on the device
};

std::string buffer_name(const Graph& graph, const Buffer& buffer);

// Why an op of a kind that serves several ends runs; none for every other op.
enum class OpPurpose : uint8_t {
  none,
  unscale,   // grad_scale: multiply the gradient shards by 1 / loss scale (GradScaler.unscale_)
  clip,      // grad_scale: multiply them by the clip coefficient (clip_grad_norm_)
  inf_flag,  // scalar all_reduce (no buffers): the inf/nan flag of the inf_check it waits on
  norm_sq,   // scalar all_reduce (no buffers): the squared norm of the grad_norm it waits on
};
const char* op_purpose_name(OpPurpose purpose);

struct ScheduleOp {
  OpKind kind = OpKind::forward;
  OpPurpose purpose = OpPurpose::none;
  Phase phase = Phase::forward;
  int stream = 0;
  int unit = -1;      // FSDP unit the op belongs to (-1: none)
  int graph_op = -1;  // index into Graph::ops for forward/backward/recompute
  int micro_step = 0;
  SmallVector<int, 4> waits;    // op indices that must complete before this op starts
  SmallVector<int, 8> buffers;  // buffers the op reads or writes
  // Collectives only.
  int group = -1;            // index into Schedule::groups
  int64_t seq = -1;          // per-group sequence number, equal across the group's ranks
  int64_t bytes = 0;         // collective: S (see file comment); copies/casts: bytes moved
  DType dtype = DType::f32;  // element type of a collective or copy
};

enum class ActionKind : uint8_t { launch, alloc, free, host_wait };
const char* action_kind_name(ActionKind kind);

struct Action {
  ActionKind kind = ActionKind::launch;
  int op = -1;                      // launch, host_wait
  int buffer = -1;                  // alloc, free
  SmallVector<int, 4> pending_ops;  // free: ops on other streams still using the buffer
};

struct Schedule {
  static constexpr int kSchemaVersion = 1;
  int rank = 0;
  World world;
  Workload workload;  // B = batch_size, T = seq_len
  int64_t grad_accum_steps = 1;
  bool expandable_segments = false;  // the policy's allocator.expandable_segments
  std::vector<std::string> streams;  // stream names; index 0 is "host"
  std::vector<StreamRole> stream_roles;
  std::vector<ProcessGroup> groups;  // identical on every rank
  std::vector<Buffer> buffers;       // persistent ones first
  std::vector<ScheduleOp> ops;
  std::vector<Action> actions;  // the step, in host issue order (persistent buffers excluded)
  // Per graph op: the SDPA kernel PyTorch runs for each attention op under the
  // policy's device and sdpa_backend (plan/sdpa.h), SdpaKernel::none for
  // other ops; empty for a schedule not built by build_schedule.
  std::vector<SdpaKernel> attention_kernels;

  int stream_index(StreamRole role) const;  // -1 if the schedule has no such stream
  int64_t persistent_device_bytes() const;
  int64_t persistent_host_bytes() const;
};

// Builds rank `rank`'s schedule. Throws plan::Error for policies it cannot plan.
// `sizes`: the graph's sizes at the policy's workload when the caller keeps
// them (sweeps); ignored when they are for another workload. `acts`: an
// activation plan built for these very `units` (same object) with
// checkpointed_units(policy, units) and cached_ops(policy, graph, units, those)
// (sweeps share them); ignored otherwise.
Schedule build_schedule(const Graph& graph, const Policy& policy, const UnitPlan& units, int rank,
                        const WorkloadSizes* sizes = nullptr, const ActivationPlan* acts = nullptr);
// build_schedule's schedule before its first action: the same streams,
// groups and persistent buffers in the same order, no ops, no actions; it
// throws what build_schedule throws. Cheap: an executor that allocates the
// persistent buffers before anything else (sim/) can tell from it alone
// whether a step runs out of memory before it starts.
Schedule build_persistent_schedule(const Graph& graph, const Policy& policy, const UnitPlan& units,
                                   int rank);

// Other ranks' view of one rank's schedule. FSDP ranks' schedules are equal
// up to which process group of each role (GroupRole) their collectives use, so one built
// schedule stands for every rank. used: the groups holding s.rank, ascending;
// of_rank[r][i]: the group of used[i]'s family that holds rank r.
struct RankGroups {
  std::vector<int> used;
  std::vector<std::vector<int>> of_rank;  // [world_size][used.size()]
};
RankGroups rank_groups(const Schedule& s);

// Wire bytes per rank of one collective op (nccl-tests bus factors).
double collective_wire_bytes(const ScheduleOp& op, const Schedule& schedule);

struct CommBytes {
  double all_gather = 0, reduce_scatter = 0, all_reduce = 0;
  double total() const { return all_gather + reduce_scatter + all_reduce; }
};
// Sum over the schedule's collectives of their wire bytes per rank.
CommBytes schedule_comm_bytes(const Schedule& schedule);
// The closed forms of FSDP_SEMANTICS.md section 9 with its refinements,
// computed from the units alone (not from a schedule): what the schedule must match.
CommBytes closed_form_comm_bytes(const Graph& graph, const Policy& policy, const UnitPlan& units);

// Checks the schedule's invariants; returns human-readable violations (empty
// when valid): every compute use of a unit's parameters is ordered after the
// all-gather that filled them; no buffer is used outside [alloc, free]; two
// uses of a buffer on different streams are ordered (stream order, waits,
// host waits: streams run concurrently on a GPU); every transient buffer is
// freed by the end of the step; waits point backwards; the typed roles agree
// with the rest: a buffer's role with its category, persistence, tensor,
// graph op and dtype (one param dtype, one reduce dtype, fp32 shards); an
// op's purpose with its kind and the op it waits on; a collective's group
// role with its kind; group 0 is the world and every rank is in exactly one
// group of each role.
std::vector<std::string> check_schedule(const Graph& graph, const UnitPlan& units,
                                        const Schedule& schedule);

}  // namespace shardscope::plan
