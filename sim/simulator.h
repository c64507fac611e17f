// Discrete-event executor of a plan::Schedule on a HardwareModel
// (docs/simulator.md; the execution rules are docs/schedule.md's 1-5). FSDP
// ranks' schedules are equal up to the process groups they use
// (plan::rank_groups); ranks whose groups sit alike on the cluster (same
// GroupSpan for each group used) run identically, so one simulated rank per
// such class stands for all of them (RankTrace::represents): a 1,024-GPU
// world in a regular layout costs one rank.
//
// Events sit in a heap ordered by (time, sequence number): equal times are
// processed first in, first out, so a run is deterministic. Two event types:
// the host resumes (after a launch overhead or a host_wait), an op finishes.
// After each event every stream whose head op is ready starts it (collectives
// first, so a compute op starting at the same instant sees them as running).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "plan/graph.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "plan/workload_sizes.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"
#include "sim/time.h"
#include "traces/metrics.h"
#include "traces/trace.h"

namespace shardscope::sim {

struct AllocatorHistory;  // sim/memory_history.h

struct SimOptions {
  int64_t memory_limit_bytes = 0;  ///< device capacity for the allocator; 0 = hw.memory_bytes
  std::string model_name;          ///< stamped into the trace metadata
  std::string policy_json;
  std::string hardware_name;  ///< default: hw.name
  /// false: no trace is built; metrics are accumulated while simulating
  /// (sweeps). SimResult::trace is then empty.
  bool record_trace = true;
  /// The graph's sizes at the schedule's workload when the caller shares them
  /// across simulations (sweeps); null = evaluated per simulation.
  const plan::WorkloadSizes* sizes = nullptr;
  /// When set, receives every allocator event of the simulated rank standing
  /// for schedule.rank (simulate --memory-snapshot).
  AllocatorHistory* allocator_history = nullptr;
};

/// One class of ranks that run identically.
struct RankClassResult {
  int32_t rank = 0;                 ///< the simulated representative
  std::vector<int32_t> represents;  ///< every rank of the class, ascending
  bool fits = true;
  TimeNs step_time;
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t peak_requested_bytes = 0;  ///< see SimResult
};

/// Live device bytes (allocator block sizes) at the first moment allocated
/// reached its peak.
struct PeakBreakdown {
  TimeNs time;
  int64_t allocated_bytes = 0;
  std::map<std::string, int64_t> by_category;  ///< plan::buffer_category_name -> bytes
  std::map<std::string, int64_t> by_unit;      ///< unit name ("<none>" for no unit) -> bytes
};

/// Fields without a class name are those of the class holding the schedule's
/// own rank, except fits (all classes fit), step_time and the peaks (max over
/// classes) and peak (the breakdown of the class with the highest peak).
///
/// When fits is false the step stopped at the failed allocation: step_time,
/// the op times and the time fields of `metrics` cover the step only up to
/// there and predict nothing (the CLI prints and writes none of them); the
/// peaks are real, a lower bound of what the step would need.
struct SimResult {
  bool fits = true;         ///< false: the allocator ran out of memory; the step stopped there
  std::string oom_buffer;   ///< the buffer whose allocation failed
  int64_t oom_bytes = 0;    ///< its size
  std::string oom_message;  ///< the allocator's message
  int32_t oom_rank = -1;    ///< the simulated rank that ran out of memory
  int64_t oom_allocated_bytes = 0;  ///< allocator counters at the failure (block bytes)
  int64_t oom_reserved_bytes = 0;
  TimeNs step_time;  ///< last op end or host end, whichever is later (step starts at 0)
  std::vector<TimeNs> op_start, op_end;  ///< per schedule op; -1 ns when it never ran
  int64_t persistent_bytes = 0;          ///< requested bytes of persistent device buffers
  int64_t peak_allocated_bytes = 0;      ///< allocator block bytes (512 B rounded)
  int64_t peak_reserved_bytes = 0;
  /// Peak of the buffers' unrounded sizes, live in host order: allocation
  /// without 512 B rounding or caching (what PyTorch's CPU allocator,
  /// FSDPMemTracker and requested_bytes count); the figure to compare with
  /// CPU references (tests/reference/).
  int64_t peak_requested_bytes = 0;
  /// Block bytes the caching allocator holds for cuBLAS / cuBLASLt
  /// workspaces all step (HardwareModel::blas_workspace_bytes x
  /// blas_workspaces, rounded): in peak_reserved_bytes, not in
  /// peak_allocated_bytes. PyTorch's max_memory_allocated is
  /// peak_allocated_bytes + this.
  int64_t blas_workspace_bytes = 0;
  PeakBreakdown peak;
  std::vector<RankClassResult> rank_classes;  ///< first: the class of schedule.rank
  uint64_t sim_events = 0;                    ///< discrete events processed, all classes
  traces::Trace trace;
  traces::Metrics metrics;  ///< traces::compute_metrics(trace), or accumulated (record_trace false)
};

/// Simulates one step of `schedule` (built for `units` of `graph`). Throws
/// Error when the schedule cannot be executed (a wait on an op never
/// launched, a collective sequence that never becomes ready). Running out of
/// memory is not an error: SimResult::fits says so.
SimResult simulate(const plan::Graph& graph, const plan::UnitPlan& units,
                   const plan::Schedule& schedule, const HardwareModel& hw,
                   const SimOptions& options = {});

}  // namespace shardscope::sim
