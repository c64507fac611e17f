// Executes one rank's plan::Schedule for real on the CPU (docs/schedule.md's
// execution rules 1-5): the host side (actions in order, buffers from alloc/'s
// CachingAllocator over HostBacking, i.e. real memory, accounting and
// recording) is the shared ScheduleRunner (schedule_runner.h); this class is
// its CPU backend: every stream but the host is a thread running its ops in
// launch order after their waits; collectives go through the communicator one
// at a time per process group in sequence order. The executor has no FSDP
// logic: what each op does follows from its kind, its purpose and its
// buffers' roles (engine/exec/layout.h).
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
#include "engine/exec/schedule_runner.h"
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
  double loss = 0;                // mean over this rank's micro-batches (unscaled)
  bool skipped = false;           // fp16 overflow: optimizer step skipped
  double grad_norm = -1;          // total norm before clipping (when clipping)
  double local_grad_norm_sq = 0;  // this rank's squared norm before the all-reduce (clipping)
  int64_t start_ns = 0, end_ns = 0;
};

class RankExecutor : private RunnerBackend {
 public:
  // The schedule must be this rank's (schedule.rank == comm.rank()). Groups of
  // the communicator are the schedule's groups, in the same order.
  RankExecutor(const plan::Graph& graph, const plan::Policy& policy, const plan::UnitPlan& units,
               const plan::Schedule& schedule, comm::Communicator& comm, const DataSource& data);
  ~RankExecutor() override;
  RankExecutor(const RankExecutor&) = delete;
  RankExecutor& operator=(const RankExecutor&) = delete;

  // Initial weights: every rank generates its own shard from the seed and
  // the parameters' names (fill_initial_shard, schedule_info.h), with no
  // communication; the values do not depend on the world size.
  void init_weights(uint64_t seed);
  // Every parameter in full (graph order), all-gathered over the shard group:
  // a collective every rank must call.
  std::vector<std::vector<float>> gather_full_params();
  // Runs training step `step` (0-based: global batch `step`).
  StepOutcome run_step(int64_t step);

  // Recorded trace of this rank (events, memory, steps) on its host clock.
  traces::Trace& trace() { return runner_.trace(); }
  int64_t optimizer_steps() const { return optimizer_steps_; }
  void set_optimizer_steps(int64_t n) { optimizer_steps_ = n; }
  LossScaler& loss_scaler() { return scaler_; }
  int64_t peak_allocated_bytes() const { return runner_.peak_allocated_bytes(); }
  int64_t persistent_allocated_bytes() const { return runner_.persistent_allocated_bytes(); }
  const alloc::CachingAllocator& allocator() const { return allocator_; }

  // Views of the persistent state (fp32 shards: parameters, gradients,
  // optimizer state tensors) for checkpoints and tests.
  float* param_shard(int unit);
  float* optimizer_state(int unit, int which);  // which < policy.optimizer.state_tensors()
  const UnitLayout& layout(int unit) const { return layouts_[static_cast<size_t>(unit)]; }
  int64_t shard_index() const { return shard_index_; }
  const plan::Schedule& schedule() const { return s_; }
  // Mixture of experts: per router op (graph order), the tokens each expert
  // got in the forward passes of the last step (all micro-steps, recomputes
  // not counted). Empty for a model without routed layers.
  const std::vector<std::vector<int64_t>>& expert_tokens() const { return expert_tokens_; }

 private:
  struct Task {
    int op = -1;
    std::vector<void*> ptrs;     // parallel to ScheduleOp::buffers
    std::vector<FirstUse> init;  // per buffer: what its first user does first
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
  // Records the step's first failure; `comm_failure`: it came from the
  // communicator (a timeout, a dead or aborted peer), rethrown as CommError.
  void fail(const std::string& message, bool comm_failure);
  void check_failed();

  // RunnerBackend (the host side)
  void before_action() override { check_failed(); }
  void poll_completions() override;
  std::vector<alloc::EventId> free_events(int buffer,
                                          const plan::SmallVector<int, 4>& pending) override;
  void launch(int op, LaunchBuffers&& buffers) override;
  void host_wait(int op) override { wait_ops({op}); }
  void* host_memory(int buffer, size_t bytes) override;
  void zero_persistent(void* address, size_t bytes) override;
  plan::DType buffer_dtype(int buffer) const {
    return s_.buffers[static_cast<size_t>(buffer)].dtype;
  }

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
  std::vector<std::vector<float>> host_bufs_;  // on_host buffers (host_memory)

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
  bool error_from_comm_ = false;

  // step state (written by stream threads in stream order)
  int64_t step_ = 0;
  double micro_loss_sum_ = 0;
  float dloss_ = 1.0f;
  double found_inf_ = 0, norm_sq_ = 0, grad_norm_ = -1, local_norm_sq_ = 0;
  int64_t optimizer_steps_ = 0;
  LossScaler scaler_;
  std::vector<int> router_ordinal_;                  // per graph op: its router number (-1)
  std::vector<std::vector<int64_t>> expert_tokens_;  // per router: tokens per expert this step

  ScheduleRunner runner_;  // after allocator_ (it holds a reference)
};

}  // namespace shardscope::engine::exec
