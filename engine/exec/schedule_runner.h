// The host side of executing one rank's plan::Schedule, written once for
// every backend (the CPU engine's RankExecutor, the CUDA engine's
// CudaRankExecutor; docs/engine.md "Adding an op or a buffer role"):
//
//  - the schedule's actions in host order (launch, alloc, free, host_wait);
//  - every device buffer from alloc/'s CachingAllocator (the backend's
//    Backing), alloc and free in host order, so allocated bytes follow the
//    plan exactly as the simulator's do; allocated / peak / persistent
//    accounting; persistent buffers before the first step (zeroed);
//  - what each buffer's first user does first, from its role alone
//    (plan::accumulates: zero; plan::BufferRole::input: the data);
//  - the recording: one lane per schedule stream, every allocation and free,
//    the host waits, one event per op and the step.
//
// What differs between backends (where an op runs and when it completes,
// what a free must wait for, host memory) is RunnerBackend. The runner holds
// no FSDP logic and no op semantics: those are the plan's and the backend's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "alloc/caching_allocator.h"
#include "plan/graph.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "plan/workload_sizes.h"
#include "traces/trace.h"

namespace shardscope::engine::exec {

// What a buffer's first user does before the op (in stream order).
enum class FirstUse : uint8_t {
  none,
  zero,  // ops add into it (plan::accumulates), or the backend asked (zero_at_alloc)
  data,  // a graph input: this micro-batch's data (exec::fill_input, data.h)
};

// An op's operands at its launch, parallel to ScheduleOp::buffers.
struct LaunchBuffers {
  std::vector<void*> ptrs;     // device (allocator) or host (on_host) addresses
  std::vector<FirstUse> init;  // what the op does first to each (once per allocation)
};

// What a backend supplies to the runner. Called on the host thread only.
class RunnerBackend {
 public:
  virtual ~RunnerBackend() = default;
  // Before each action: a backend whose ops run elsewhere (CPU stream
  // threads) reports their failures here by throwing.
  virtual void before_action() {}
  // Tells the allocator of the ops completed so far (their events), before it
  // allocates or frees, so that blocks waiting on them become reusable.
  virtual void poll_completions() = 0;
  // The events a free of `buffer` waits on before the block is reused
  // (record_stream): `pending` are the ops of other streams that used it.
  virtual std::vector<alloc::EventId> free_events(int buffer,
                                                  const plan::SmallVector<int, 4>& pending) = 0;
  // Issues op `op` (the backend may run it later, on its stream, after its waits).
  virtual void launch(int op, LaunchBuffers&& buffers) = 0;
  // Blocks the host until op `op` has completed.
  virtual void host_wait(int op) = 0;
  // Zeroed host memory of `bytes` for a persistent on_host buffer (cpu_offload),
  // owned by the backend until it is destroyed.
  virtual void* host_memory(int buffer, size_t bytes) = 0;
  // Zeroes a persistent device buffer before the first step.
  virtual void zero_persistent(void* address, size_t bytes) = 0;
  // After every device allocation (CUDA: the segments it made the allocator reserve).
  virtual void allocated(int /*buffer*/, const alloc::Allocation& /*a*/) {}
};

class ScheduleRunner {
 public:
  // The allocator must outlive the runner. `label_errors`: an action that
  // throws is rethrown as ExecError "rank R, <the action>: <what>" (CUDA);
  // otherwise as it is (the CPU engine's stream failures carry their own).
  ScheduleRunner(const plan::Graph& graph, const plan::UnitPlan& units,
                 const plan::Schedule& schedule, alloc::CachingAllocator& allocator,
                 RunnerBackend& backend, traces::Source source, bool label_errors);

  // Persistent buffers: device ones from the allocator, host ones from the
  // backend; all zeroed. Once, before the first step.
  void allocate_persistent();
  // Per buffer: its first user zeroes it at every allocation (the CUDA
  // engine's all-gather outputs under emulated peers). Before the first step.
  void zero_at_alloc(int buffer) { zero_at_alloc_[static_cast<size_t>(buffer)] = 1; }

  // The step's actions in host order. Each host wait appears in the trace as
  // a "host wait" sync event on the host lane.
  void run_actions();
  // Recording of a finished step: one event per op on its stream's lane at
  // the times `time_of` gives (false: the op is recorded elsewhere, e.g. by
  // CUPTI), then the step [start_ns, end_ns].
  void record_step(int64_t step, int64_t start_ns, int64_t end_ns,
                   const std::function<bool(int op, int64_t* start, int64_t* end)>& time_of);

  // Address of a live buffer (device, or host for on_host); throws when it is
  // not allocated.
  void* address(int buffer) const;
  // The persistent buffer of `role` of `unit` (-1: none).
  int persistent_buffer(plan::BufferRole role, int unit) const;
  // "op N (kind name, stream S)" for messages.
  std::string op_label(int op) const;

  int64_t allocated_bytes() const { return allocated_; }
  int64_t peak_allocated_bytes() const { return peak_allocated_; }
  int64_t persistent_allocated_bytes() const { return persistent_allocated_; }
  traces::Trace& trace() { return trace_; }
  traces::RankTrace& rank_trace() { return trace_.ranks[0]; }
  uint32_t lane(int stream) const { return lanes_[static_cast<size_t>(stream)]; }

 private:
  void alloc(int buffer);
  void free(int buffer, const plan::SmallVector<int, 4>& pending);
  void launch(int op);
  void host_wait(int op);
  std::string action_label(const plan::Action& a) const;

  const plan::Graph& g_;
  const plan::UnitPlan& up_;
  const plan::Schedule& s_;
  alloc::CachingAllocator& allocator_;
  RunnerBackend& backend_;
  bool label_errors_;
  std::vector<std::optional<alloc::Allocation>> live_;  // per buffer (device)
  std::vector<void*> host_;                             // per buffer (on_host)
  std::vector<FirstUse> pending_init_;                  // per buffer, until its first user
  std::vector<uint8_t> zero_at_alloc_;                  // per buffer
  int64_t allocated_ = 0, peak_allocated_ = 0, persistent_allocated_ = 0;
  plan::WorkloadSizes sizes_;  // FLOPs and bytes per graph op, for the recorded events
  traces::Trace trace_;
  std::vector<uint32_t> lanes_;  // per schedule stream
};

}  // namespace shardscope::engine::exec
