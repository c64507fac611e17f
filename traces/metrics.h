// Metrics of a trace, the Holistic Trace Analysis way (definitions and
// choices: docs/traces.md, "Metrics"). One piece of code for measured and
// predicted runs: compute_metrics(trace) feeds a MetricsAccumulator, which the
// simulator can also feed directly while it runs, without building a Trace.
//
// Per rank and per step (window of the rank's steps; a rank without steps is
// one window):
//   step time        the iteration period: the step's own range (end - start),
//                    or the distance to the next step's start when the range
//                    is empty; never the union of host and lagging device work
//                    (a rank without steps: last event end - first event start)
//   host-device lag  end of the step's last busy device event - end of its
//                    period (negative: the device finished before the host)
//   compute          |union(COMP)|, COMP = category compute
//   comm             |union(COMM)|, COMM = the collectives (comm.*)
//   comm wait        comm before each collective's last rank arrived (a trace
//                    holding every rank; else 0); transfer = comm - wait
//   exposed comm     |union(COMM) \ union(COMP)|
//   overlap          |union(COMP) ∩ union(COMM)| / |union(COMM)| (0 when no COMM)
//   idle             device span - |union(busy events on device lanes)|; busy =
//                    every category but sync and marker; device lane = not host
//   peak allocated / reserved: the highest counter value in the window,
//                    including the value carried in from before it
// A rank reports the median over steps 2..S when it has S > 1 steps, else its
// one step. The top level reports max over ranks (step time, peaks) and the
// mean over ranks (the rest), each rank weighted by the ranks it represents.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "traces/interval_union.h"
#include "traces/trace.h"

namespace shardscope::traces {

struct MetricValues {
  double step_time_ms = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  double compute_ms = 0;
  double comm_ms = 0;
  double exposed_comm_ms = 0;
  double overlap = 0;  // in [0, 1]
  double idle_ms = 0;
  // HTA's temporal breakdown: device span = last end - first start of the
  // busy device events; idle = span - |union(busy)|; compute (above) =
  // |union(COMP)|; non-compute = |union(busy) \ union(COMP)| (copies,
  // memsets, collectives not under compute). With COMP on device lanes only
  // (every profiler trace), compute + non-compute + idle = span.
  double device_span_ms = 0;
  double non_compute_ms = 0;
  // How far the device runs behind the host loop: the end of the step's last
  // busy device event minus the end of its period (step start + step time),
  // in ms; negative when the device finished first (a synchronizing loop).
  // 0 in a window without device events or without steps.
  double host_device_lag_ms = 0;
  // Communication split at each collective's last arrival (traces/
  // metrics_collectives.h), when the trace holds every rank: transfer =
  // |union(COMM after the last rank arrived)|, wait = comm - transfer. A
  // trace that cannot be split (one rank of many, the simulator's
  // representatives) has transfer = comm and wait 0.
  double comm_wait_ms = 0;
  double comm_transfer_ms = 0;
};

// Which step an event belongs to.
enum class StepRule : uint8_t {
  // Per trace: launch when any rank has launch flows (is_launch_flow), else markers.
  automatic,
  // Holistic Trace Analysis' rule, for profiler traces: a host event belongs
  // to the step whose range holds its start (start <= t < end); a device
  // event to the step of the host call that launched it, and to none when
  // it has no launcher. The last step is not reported (unfinished).
  launch,
  // The trace's own step markers: an event belongs to the step it starts
  // in (steps[i].start <= start < steps[i+1].start; the last is open-ended).
  markers,
};
const char* step_rule_name(StepRule r);  // "automatic", "launch", "markers"

// One step number: of one rank (RankMetrics::per_step), or aggregated over
// the ranks that have it (Metrics::steps; max / mean as at the top level).
struct StepMetrics : MetricValues {
  int64_t step = 0;       // the recorded number; 0 for the implicit step of a trace without steps
  bool reported = false;  // part of the median
  int64_t device_events = 0;  // per rank: busy device events in the step
};

struct RankMetrics : MetricValues {
  int32_t rank = 0;
  std::vector<int32_t> represents;  // empty: itself
  int64_t steps = 0;                // windows seen (1 for a rank without steps)
  StepRule rule = StepRule::markers;
  std::vector<StepMetrics> per_step;  // every step of this rank, in order
  int64_t device_events = 0;          // busy device events in any step (or all, without steps)
  int64_t outside_steps_device_events =
      0;  // in no step (before the first; launch rule: unlaunched)
};

struct BreakdownRow {
  std::string key;  // unit, op type (or name when the event has none) or category
  // Sums over the reported steps of every rank in the trace.
  int64_t count = 0;
  double total_ms = 0;
  double mean_ms = 0;
  double self_ms = 0;  // total minus events directly nested in these, on the same lane
  // Per step and rank: the sums above over Metrics::rank_steps, each rank
  // weighted by the ranks it represents. Comparable between traces with
  // different step and rank counts (what diff compares).
  double count_per_step = 0;
  double per_step_ms = 0;
  double self_per_step_ms = 0;
  // Of per_step_ms, the time collectives spent waiting for their last rank.
  double wait_per_step_ms = 0;
};

struct Metrics {
  Source source = Source::unknown;
  int32_t world_size = 0;
  MetricValues total;
  std::vector<RankMetrics> ranks;  // by rank id
  std::vector<StepMetrics> steps;  // by step number
  // Reported (rank, step) pairs, each rank weighted by the ranks it
  // represents: the divisor of the breakdowns' per-step values (2 ranks x 9
  // reported steps = 18; one simulated step of a rank standing for 8 ranks
  // = 8, its sums also weighted by 8).
  double rank_steps = 0;
  // Over the reported steps of every rank, largest total first: sums
  // (count, total_ms, self_ms) and per step and rank (count_per_step,
  // per_step_ms, self_per_step_ms).
  std::vector<BreakdownRow> by_unit;
  std::vector<BreakdownRow> by_op;
  std::vector<BreakdownRow> by_category;
  // What a reader must know to read the numbers right: the step rule, steps
  // left out, values that are not measured (no device events). Also in
  // format_metrics and metrics_to_json ("notes").
  std::vector<std::string> notes;
  bool device_measured = true;  // some rank has busy device events
  // Collectives were matched across ranks (comm_wait_ms / comm_transfer_ms
  // measured); false also when the trace has none.
  bool comm_split = false;
};

// compute_metrics under a step rule the trace cannot follow (launch without
// launch links). A trace whose steps are broken (out of order, overlapping)
// throws plain std::invalid_argument instead: `report` says --step-rule only
// for this one.
class StepRuleError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct MetricsOptions {
  // Per-unit / per-op breakdowns keep 40 bytes per event until finish() (to
  // find nesting for self time; 4 when the events are lent with
  // breakdown_reads, as compute_metrics does); sweeps that only need the
  // totals turn them off and keep memory proportional to the busy-interval
  // unions.
  bool breakdown = true;
  // compute_metrics: which step rule. launch on a trace without launch
  // flows is an error (StepRuleError), never a quiet fallback.
  StepRule step_rule = StepRule::automatic;
};

// Streaming metrics. Feed, for each rank, its steps and its events and memory
// records in any order, with one rule: a step must be added before any event
// or memory record at or after its start (so membership never changes after
// the fact). Each method throws std::invalid_argument when it is broken.
class MetricsAccumulator {
 public:
  explicit MetricsAccumulator(MetricsOptions options = {});
  // Event string ids (name, unit, op) refer to `strings` (copied).
  MetricsAccumulator(const StringTable& strings, MetricsOptions options = {});

  // The table Event string ids refer to; intern into it when feeding directly.
  StringTable& strings() { return strings_; }

  void set_source(Source s) { source_ = s; }
  void set_world_size(int32_t n) { world_size_ = n; }
  // Optional: declares a rank and the ranks it stands for (weights of the
  // means). Ranks are also declared by their first event.
  void add_rank(int32_t rank, const std::vector<int32_t>& represents = {});
  // Optional, before the rank's first step or event: launch or markers
  // (the default).
  void set_step_rule(int32_t rank, StepRule rule);
  void add_step(int32_t rank, const Step& step);
  // Sets the end of the rank's latest step once it is known (a step added at
  // its start, as the simulator does); markers rule only, since under the
  // launch rule the end decides which host events belong to the step.
  void end_step(int32_t rank, int64_t end_ns);
  void add_event(int32_t rank, LaneKind lane_kind, const Event& e);
  // `step_time_ns` decides the step instead of e.start_ns: under the launch
  // rule, the start of the host call that launched a device event, or
  // kNoStep for device work with no launcher (it belongs to no step).
  void add_event(int32_t rank, LaneKind lane_kind, const Event& e, int64_t step_time_ns);
  static constexpr int64_t kNoStep = INT64_MIN;
  // A collective whose last rank arrived at `transfer_start_ns`: the part of
  // it before that is waiting, the rest transfer (docs/traces.md).
  void add_event(int32_t rank, LaneKind lane_kind, const Event& e, int64_t step_time_ns,
                 int64_t transfer_start_ns);
  // What matching the collectives across ranks gave (match_collectives):
  // whether comm is split into wait and transfer, why not, how many
  // collective events were left unmatched. Notes say so; the simulator
  // (whose comm is all transfer) gets no note.
  void set_comm_split(bool split, const std::string& not_split_reason = "", int64_t unmatched = 0);
  void add_memory(int32_t rank, const MemoryEvent& m);
  // Optional, before the rank's first event (compute_metrics does it): the
  // rank's events are `events`, fed in index order, each once, and both
  // arrays outlive finish(). The breakdown then reads them in place and
  // keeps 4 bytes per event (its step) instead of a 40-byte record.
  // `transfer_start`: each event's transfer start, as given to add_event
  // (nullptr: the event's start).
  void breakdown_reads(int32_t rank, const std::vector<Event>* events,
                       const std::vector<int64_t>* transfer_start);

  Metrics finish() const;

 private:
  struct Window {
    int64_t first_start = INT64_MAX;
    int64_t last_end = INT64_MIN;
    IntervalUnion comp, comm, device;
    IntervalUnion transfer;  // COMM after each collective's last arrival
    bool has_memory = false;
    int64_t peak_allocated = 0;
    int64_t peak_reserved = 0;
    int64_t last_time = 0;  // latest memory record in the window
    int64_t last_allocated = 0;
    int64_t last_reserved = 0;
    int64_t device_events = 0;  // busy events on device lanes
  };
  struct SelfRecord {
    int64_t start;
    int64_t end;
    int64_t wait;  // collectives: waiting for the last rank, ns
    uint32_t unit;
    uint32_t op;
    int32_t window;  // -1 = before the first step
    Category category;
  };
  struct RankState {
    StepRule rule = StepRule::markers;
    std::vector<int32_t> represents;
    std::vector<Step> steps;
    std::deque<Window> windows;  // one per step
    Window before;               // before the first step; the only window when no steps
    int64_t latest = INT64_MIN;  // latest event start / memory time added
    std::unordered_map<uint32_t, std::vector<SelfRecord>> lanes;
    // breakdown_reads: the events (instead of `lanes`) and each one's window.
    const std::vector<Event>* events = nullptr;
    const std::vector<int64_t>* transfer_start = nullptr;
    std::vector<int32_t> event_window;
  };

  RankState& rank_state(int32_t rank);
  // -1 = in no step (before the first; launch rule: outside every step's range).
  static int32_t window_of(const RankState& r, int64_t t);
  // Markers rule whatever the rank's rule (memory records).
  static int32_t window_by_start(const RankState& r, int64_t t);
  static Window& window(RankState& r, int32_t index) {
    return index < 0 ? r.before : r.windows[static_cast<size_t>(index)];
  }

  MetricsOptions options_;
  StringTable strings_;
  Source source_ = Source::unknown;
  int32_t world_size_ = 0;
  bool comm_split_ = false;
  std::string not_split_reason_;
  int64_t unmatched_collectives_ = 0;
  std::map<int32_t, RankState> ranks_;
};

Metrics compute_metrics(const Trace& t, MetricsOptions options = {});

// What metrics_to_json writes for the time fields: step_time_ms, compute_ms,
// comm_ms, exposed_comm_ms, overlap, idle_ms (top level, ranks, steps) and the
// breakdown rows' total_ms, mean_ms and self_ms.
enum class TimeFields {
  values,
  // null: a simulated step that ran out of memory stopped at the failed
  // allocation, so its times predict nothing. Memory fields and counts stay
  // (the peaks up to the failure: a lower bound).
  withheld,
};

// The metrics contract of ARCHITECTURE.md ("Output contracts") plus "steps"
// and "breakdown" ({"by_unit", "by_op", "by_category"}, at most
// `breakdown_rows` rows each; -1 = all).
nlohmann::json metrics_to_json(const Metrics& m, int breakdown_rows = 50,
                               TimeFields times = TimeFields::values);
// A table for people (`shardscope report`).
std::string format_metrics(const Metrics& m, int breakdown_rows = 15);

}  // namespace shardscope::traces
