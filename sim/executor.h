// The simulator's per-rank executor (internal to sim/): it replays one rank's
// schedule as discrete events on the host thread and the schedule's streams,
// and drives the caching allocator with the schedule's buffers. The event loop
// lives in sim/executor.cpp, the memory accounting in sim/executor_memory.cpp,
// and simulate() (which runs one Executor per class of identical ranks) in
// sim/simulator.cpp. Times are simulated nanoseconds (sim/time.h).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "alloc/backing.h"
#include "alloc/caching_allocator.h"
#include "sim/cost_model.h"
#include "sim/memory_history.h"
#include "sim/simulator.h"

namespace shardscope::sim::detail {

enum class EventType : uint8_t { host_resume, op_finish };

struct SimEvent {
  TimeNs time;
  uint64_t seq = 0;  // insertion order: FIFO among equal times
  EventType type = EventType::host_resume;
  int op = -1;  // op_finish
};

struct Later {
  bool operator()(const SimEvent& a, const SimEvent& b) const {
    if (a.time != b.time) return a.time > b.time;
    return a.seq > b.seq;
  }
};

class Executor final : public alloc::EventSource {
 public:
  /// `trace` (or, when null, `acc`) receives the rank's events.
  Executor(const plan::Graph& graph, const plan::UnitPlan& units, const plan::Schedule& schedule,
           const HardwareModel& hw, const SimOptions& options, std::vector<GroupSpan> spans,
           int32_t rank, std::vector<int32_t> represents, traces::Trace* trace,
           traces::MetricsAccumulator* acc)
      : graph_(graph),
        units_(units),
        sched_(schedule),
        hw_(hw),
        cost_(hw, graph, schedule, std::move(spans), options.sizes),
        backing_(static_cast<uint64_t>(options.memory_limit_bytes > 0 ? options.memory_limit_bytes
                                                                      : hw.memory_bytes)),
        allocator_(backing_,
                   alloc::AllocatorConfig{alloc::Mode::caching, schedule.expandable_segments}),
        rank_id_(rank),
        represents_(std::move(represents)),
        trace_(trace),
        acc_(acc) {
    allocator_.set_event_source(this);
  }

  SimResult run();
  // Every allocator event from here on goes to `history`, with the buffer
  // whose allocation or free caused it.
  void record_allocator(AllocatorHistory* history) {
    history_observer_.history = history;
    history->capacity_bytes = backing_.capacity_bytes();
    history->expandable_segments = sched_.expandable_segments;
    allocator_.set_observer(&history_observer_);
  }

  // alloc::EventSource. The simulator passes events to free() itself and never
  // calls record_stream(), so record_event is never called.
  alloc::EventId record_event(alloc::StreamId) override { return 0; }
  // Out of memory: the host blocks until the outstanding ops have finished
  // (PyTorch's synchronize_and_free_events), advancing simulated time.
  bool synchronize(const std::vector<alloc::EventId>& outstanding) override;

 private:
  void push(TimeNs t, EventType type, int op = -1) {
    heap_.push(SimEvent{t, next_seq_++, type, op});
  }
  // now + d, refused (naming the hardware) where the step's int64 ns clock
  // would overflow: the cost model bounds each op to 1e6 s and validate()
  // each latency to 1000 s, but a schedule of millions of such ops could
  // still pass 2^63 ns.
  TimeNs later(TimeNs now, TimeNs d) const {
    int64_t t = 0;
    if (d.ns < 0 || __builtin_add_overflow(now.ns, d.ns, &t))
      throw Error("hardware '" + hw_.name +
                  "': the simulated step would last past 2^63 ns (292 years): check its "
                  "latencies (*_ns), bandwidths, peak FLOP/s and contention_factor");
    return TimeNs(t);
  }
  bool run_host(TimeNs now);  // false: out of memory
  // Host dispatch ns before launching schedule op `op` (OpLevelModel::host_dispatch_ns_of).
  int64_t host_dispatch_ns(int op) const;
  void finish_op(int op, TimeNs now);
  void start_ready(TimeNs now);
  bool ready(int op) const;
  void start(int op, TimeNs now);
  bool allocate(int buffer);  // at host_now_
  bool warm_up_with_blas_workspaces();
  void release(int buffer, const plan::SmallVector<int, 4>& pending);
  void record_peak(TimeNs now);
  // Sinks: the trace when recording one, else the metrics accumulator.
  void emit_event(size_t lane, traces::Category category, TimeNs start, TimeNs dur,
                  uint32_t name = traces::kNoString, uint32_t unit = traces::kNoString,
                  uint32_t op_type = traces::kNoString, uint64_t bytes = 0, uint64_t flops = 0);
  void emit_memory(TimeNs now, int64_t bytes, uint64_t address, size_t lane,
                   plan::BufferCategory category);
  uint32_t intern(const std::string& s) { return trace_ ? trace_->intern(s) : traces::kNoString; }
  std::string unit_name(int unit) const {
    return unit >= 0 && unit < static_cast<int>(units_.units.size())
               ? units_.units[static_cast<size_t>(unit)].name
               : std::string("<none>");
  }

  struct HistoryObserver final : alloc::Observer {
    explicit HistoryObserver(const int* buffer) : current_buffer(buffer) {}
    void on_event(const alloc::AllocatorEvent& event) override {
      history->events.push_back(event);
      history->buffers.push_back(*current_buffer);
    }
    AllocatorHistory* history = nullptr;
    const int* current_buffer = nullptr;
  };
  int current_buffer_ = -1;  // the buffer being allocated or freed; -1 otherwise
  HistoryObserver history_observer_{&current_buffer_};

  const plan::Graph& graph_;
  const plan::UnitPlan& units_;
  const plan::Schedule& sched_;
  const HardwareModel& hw_;
  CostModel cost_;
  alloc::NullBacking backing_;
  alloc::CachingAllocator allocator_;

  std::priority_queue<SimEvent, std::vector<SimEvent>, Later> heap_;
  uint64_t next_seq_ = 0;

  // Host.
  size_t next_action_ = 0;
  bool overhead_paid_ = false;  // the current launch action's overhead has elapsed
  int waiting_on_ = -1;         // host_wait op the host is blocked on
  TimeNs wait_started_;
  TimeNs host_now_;       // the host's clock while it runs actions
  bool in_sync_ = false;  // inside synchronize(): no calls back into the allocator
  bool host_done_ = false;
  TimeNs host_end_;

  // Ops and streams.
  std::vector<char> launched_, started_, done_;
  std::vector<std::deque<int>> stream_queue_;  // launched, not started, in launch order
  std::vector<int> stream_running_;            // -1 = idle
  std::vector<int64_t> group_next_seq_;
  std::vector<char> group_busy_;
  int active_collectives_ = 0;
  std::vector<uint32_t> op_event_;  // index into the rank's events

  // Memory.
  std::vector<std::optional<alloc::Allocation>> live_;
  int64_t allocated_ = 0;
  int64_t requested_ = 0;  // unrounded bytes of the live buffers, host order
  // Live bytes per plan::BufferCategory and per unit (last slot: no unit),
  // and their values at the peak.
  static constexpr size_t kCategories = static_cast<size_t>(plan::BufferCategory::workspace) + 1;
  std::vector<int64_t> live_by_category_, live_by_unit_;
  std::vector<int64_t> peak_by_category_, peak_by_unit_;
  size_t unit_slot(int unit) const {
    return unit >= 0 && static_cast<size_t>(unit) < units_.units.size() ? static_cast<size_t>(unit)
                                                                        : units_.units.size();
  }

  // Launch queue: device ops launched and not finished.
  int64_t queued_device_ops_ = 0;
  bool queue_full_ = false;  // the host is blocked in a launch
  TimeNs queue_full_since_;

  SimResult result_;
  int32_t rank_id_;
  std::vector<int32_t> represents_;
  traces::Trace* trace_;
  traces::MetricsAccumulator* acc_;
  traces::RankTrace* rank_ = nullptr;  // in trace_
  // Lanes: one per schedule stream, then the host thread's; their trace
  // indices and kinds.
  std::vector<uint32_t> lanes_;
  std::vector<traces::LaneKind> lane_kinds_;
  size_t host_lane_ = 0;
};

}  // namespace shardscope::sim::detail
