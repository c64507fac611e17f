// Discrete-event executor of ONE rank's plan::Schedule on a HardwareModel
// (docs/simulator.md; the execution rules are docs/schedule.md's 1-5). FSDP
// ranks are symmetric, so the simulated rank stands for every rank of the
// world (RankTrace::represents).
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
#include "sim/cost_model.h"
#include "sim/hardware.h"
#include "sim/time.h"
#include "traces/metrics.h"
#include "traces/trace.h"

namespace shardscope::sim {

struct SimOptions {
  int64_t memory_limit_bytes = 0;  ///< device capacity for the allocator; 0 = hw.memory_bytes
  std::string model_name;          ///< stamped into the trace metadata
  std::string policy_json;
  std::string hardware_name;  ///< default: hw.name
};

/// Live device bytes (allocator block sizes) at the first moment allocated
/// reached its peak.
struct PeakBreakdown {
  TimeNs time;
  int64_t allocated_bytes = 0;
  std::map<std::string, int64_t> by_category;  ///< plan::buffer_category_name -> bytes
  std::map<std::string, int64_t> by_unit;      ///< unit name ("<none>" for no unit) -> bytes
};

struct SimResult {
  bool fits = true;         ///< false: the allocator ran out of memory; the step stopped there
  std::string oom_buffer;   ///< the buffer whose allocation failed
  int64_t oom_bytes = 0;    ///< its size
  std::string oom_message;  ///< the allocator's message
  TimeNs step_time;         ///< last op end or host end, whichever is later (step starts at 0)
  std::vector<TimeNs> op_start, op_end;  ///< per schedule op; -1 ns when it never ran
  int64_t persistent_bytes = 0;          ///< requested bytes of persistent device buffers
  int64_t peak_allocated_bytes = 0;      ///< allocator block bytes (512 B rounded)
  int64_t peak_reserved_bytes = 0;
  PeakBreakdown peak;
  traces::Trace trace;
  traces::Metrics metrics;  ///< traces::compute_metrics(trace)
};

/// Simulates one step of `schedule` (built for `units` of `graph`). Throws
/// Error when the schedule cannot be executed (a wait on an op never
/// launched, a collective sequence that never becomes ready). Running out of
/// memory is not an error: SimResult::fits says so.
SimResult simulate(const plan::Graph& graph, const plan::UnitPlan& units,
                   const plan::Schedule& schedule, const HardwareModel& hw,
                   const SimOptions& options = {});

traces::MemoryCategory memory_category(plan::BufferCategory category);

}  // namespace shardscope::sim
