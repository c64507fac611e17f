// Executes one rank's plan::Schedule for real on the CPU (docs/schedule.md's
// execution rules 1-5): the host thread runs the actions in order; every other
// stream is a thread running its ops in launch order after their waits;
// collectives go through the communicator one at a time per process group in
// sequence order; every buffer comes from alloc/'s CachingAllocator over
// HostBacking (real memory) in host order, so allocated bytes follow the plan
// exactly as the simulator's do. The executor has no FSDP logic: what each op
// does follows from its kind and its buffers (engine/exec/layout.h).
//
// Numerics: fp32 math. A buffer whose plan size is 2 bytes per element holds
// bf16/fp16 values (the policy's param or reduce dtype); ops convert it to
// fp32 in a per-thread scratch (not from the allocator: the CPU has no 16-bit
// arithmetic) and round results back, so values follow the policy's casts.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "alloc/backing.h"
#include "alloc/caching_allocator.h"
#include "engine/comm/communicator.h"
#include "engine/exec/data.h"
#include "engine/exec/exec_error.h"
#include "engine/exec/layout.h"
#include "plan/policy.h"
#include "plan/schedule.h"
#include "traces/trace.h"

namespace shardscope::engine::exec {

struct LossScaler {  // torch.cuda.amp.GradScaler defaults
  bool enabled = false;
  bool dynamic = false;
  double scale = 65536.0;
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t good_steps = 0;
  // GradScaler.update() after a step: an overflow halves the scale (dynamic)
  // and skips the step; growth_interval good steps in a row double it.
  // Returns whether the optimizer step was skipped.
  bool update(bool found_inf) {
    if (!enabled) return false;
    if (dynamic) {
      if (found_inf) {
        scale *= backoff_factor;
        good_steps = 0;
      } else if (++good_steps >= growth_interval) {
        scale *= growth_factor;
        good_steps = 0;
      }
    }
    return found_inf;
  }
  // The policy's loss_scale: null -> disabled; "dynamic" -> dynamic from
  // 65536; a number -> that static scale.
  static LossScaler from_policy(const plan::Policy& policy) {
    LossScaler s;
    if (!policy.loss_scale_mode) return s;
    s.enabled = true;
    s.dynamic = *policy.loss_scale_mode == "dynamic";
    if (!s.dynamic) s.scale = policy.loss_scale_value;
    return s;
  }
};

struct StepOutcome {
  double loss = 0;        // mean over this rank's micro-batches (unscaled)
  bool skipped = false;   // fp16 overflow: optimizer step skipped
  double grad_norm = -1;  // total norm before clipping (when clipping)
  int64_t start_ns = 0, end_ns = 0;
};

class RankExecutor {
 public:
  // The schedule must be this rank's (schedule.rank == comm.rank()). Groups of
  // the communicator are the schedule's groups, in the same order.
  RankExecutor(const plan::Graph& graph, const plan::Policy& policy, const plan::UnitPlan& units,
               const plan::Schedule& schedule, comm::Communicator& comm, const DataSource& data);
  ~RankExecutor();
  RankExecutor(const RankExecutor&) = delete;
  RankExecutor& operator=(const RankExecutor&) = delete;

  // Initial weights: rank 0 builds each unit's full parameters from the seed
  // and the parameters' names and broadcasts them over the world (PyTorch's
  // sync_module_states); every rank keeps its shard.
  void init_weights(uint64_t seed);
  // Every parameter in full (graph order), all-gathered over the shard group:
  // a collective every rank must call.
  std::vector<std::vector<float>> gather_full_params();
  // Runs training step `step` (0-based: global batch `step`).
  StepOutcome run_step(int64_t step);

  // Recorded trace of this rank (events, memory, steps) on its host clock.
  traces::Trace& trace() { return trace_; }
  int64_t optimizer_steps() const { return optimizer_steps_; }
  void set_optimizer_steps(int64_t n) { optimizer_steps_ = n; }
  LossScaler& loss_scaler() { return scaler_; }
  int64_t peak_allocated_bytes() const { return peak_allocated_; }
  int64_t persistent_allocated_bytes() const { return persistent_allocated_; }
  const alloc::CachingAllocator& allocator() const { return allocator_; }

  // Views of the persistent state (fp32 shards: parameters, gradients,
  // optimizer state tensors) for checkpoints and tests.
  float* param_shard(int unit);
  float* optimizer_state(int unit, int which);  // which < policy.optimizer.state_tensors()
  const UnitLayout& layout(int unit) const { return layouts_[static_cast<size_t>(unit)]; }
  int64_t shard_index() const { return shard_index_; }
  const plan::Schedule& schedule() const { return s_; }

 private:
  enum class Init : uint8_t { none, zero, data };
  struct Task {
    int op = -1;
    std::vector<void*> ptrs;  // parallel to ScheduleOp::buffers
    std::vector<Init> init;   // per buffer: what its first user does first
    int scalar = 0;           // all_reduce of a scalar: 1 found_inf, 2 norm^2
    int scale_kind = 0;       // grad_scale: 1 unscale, 2 clip
  };
  struct Stream {
    std::thread thread;
    std::deque<Task> queue;
  };

  void stream_main(int stream);
  void execute(const Task& task);
  void run_graph_op(const Task& task, const plan::ScheduleOp& op);
  void run_fsdp_op(const Task& task, const plan::ScheduleOp& op);
  void wait_ops(const plan::SmallVector<int, 4>& ops);
  void mark_done(int op);
  void fail(const std::string& message);
  void check_failed();

  // host side
  void host_launch(int op);
  void host_alloc(int buffer, int64_t now);
  void host_free(int buffer, const plan::SmallVector<int, 4>& pending, int64_t now);
  void drain_completed();
  int elem_bytes(int buffer) const;  // 4, 2 or 8 (i64 inputs)
  plan::DType buffer_dtype(int buffer) const;

  const plan::Graph& g_;
  const plan::Policy& p_;
  const plan::UnitPlan& up_;
  const plan::Schedule& s_;
  comm::Communicator& comm_;
  const DataSource& data_;
  std::vector<UnitLayout> layouts_;
  int64_t shard_index_ = 0, reshard_index_ = 0;
  plan::Workload w_;

  alloc::HostBacking backing_;
  alloc::CachingAllocator allocator_;
  std::vector<std::optional<alloc::Allocation>> live_;  // per buffer
  std::vector<std::vector<float>> host_bufs_;           // on_host buffers
  std::vector<Init> pending_init_;                      // per buffer, until its first user
  int64_t allocated_ = 0, peak_allocated_ = 0, persistent_allocated_ = 0;

  // threads
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Stream> streams_;
  std::vector<uint8_t> done_;
  std::vector<uint8_t> reported_;
  std::vector<int> completed_;  // done, not yet reported to the allocator
  std::vector<int64_t> group_next_seq_;
  std::vector<int64_t> op_start_, op_end_;
  bool stop_ = false;
  std::string error_;

  // step state (written by stream threads in stream order)
  int64_t step_ = 0;
  double micro_loss_sum_ = 0;
  float dloss_ = 1.0f;
  double found_inf_ = 0, norm_sq_ = 0, grad_norm_ = -1;
  bool unscaled_ = false;
  int64_t optimizer_steps_ = 0;
  LossScaler scaler_;

  traces::Trace trace_;
  std::vector<uint32_t> lanes_;
};

}  // namespace shardscope::engine::exec
