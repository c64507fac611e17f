#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <queue>

#include "alloc/backing.h"
#include "alloc/caching_allocator.h"
#include "plan/trace_vocabulary.h"
#include "sim/memory_history.h"
#include "sim/version.h"

namespace shardscope::sim {

namespace {

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

void Executor::emit_event(size_t lane, traces::Category category, TimeNs start, TimeNs dur,
                          uint32_t name, uint32_t unit, uint32_t op_type, uint64_t bytes,
                          uint64_t flops) {
  ++result_.sim_events;
  if (trace_) {
    traces::Event& e = traces::add_event(*rank_, lanes_[lane], name, category, start.ns, dur.ns);
    e.unit = unit;
    e.op = op_type;
    e.bytes = bytes;
    e.flops = flops;
    return;
  }
  traces::Event e;
  e.start_ns = start.ns;
  e.dur_ns = dur.ns;
  e.category = category;
  e.lane = static_cast<uint32_t>(lane);
  acc_->add_event(rank_id_, lane_kinds_[lane], e);
}

void Executor::emit_memory(TimeNs now, int64_t bytes, uint64_t address, size_t lane,
                           plan::BufferCategory category) {
  const auto reserved = static_cast<int64_t>(allocator_.counters().reserved.current);
  if (trace_) {
    traces::add_allocation(*rank_, now.ns, bytes, address, lanes_[lane],
                           plan::trace_memory_category(category), reserved);
    return;
  }
  traces::MemoryEvent m;
  m.time_ns = now.ns;
  m.bytes = bytes;
  m.allocated = allocated_;
  m.reserved = reserved;
  m.address = address;
  m.lane = static_cast<uint32_t>(lane);
  m.category = plan::trace_memory_category(category);
  acc_->add_memory(rank_id_, m);
}

bool Executor::allocate(int buffer) {
  const plan::Buffer& b = sched_.buffers.at(static_cast<size_t>(buffer));
  if (b.on_host) return true;
  if (live_[static_cast<size_t>(buffer)])
    throw Error("schedule allocates buffer '" + plan::buffer_name(graph_, b) + "' twice");
  allocator_.set_time(host_now_.ns);
  current_buffer_ = buffer;
  try {
    live_[static_cast<size_t>(buffer)] =
        allocator_.allocate(static_cast<uint64_t>(b.bytes), static_cast<alloc::StreamId>(b.stream),
                            static_cast<uint32_t>(b.category));
    current_buffer_ = -1;
  } catch (const alloc::OutOfMemory& e) {
    current_buffer_ = -1;
    result_.fits = false;
    result_.oom_buffer = plan::buffer_name(graph_, b);
    result_.oom_bytes = b.bytes;
    result_.oom_message = e.what();
    result_.oom_rank = rank_id_;
    result_.oom_allocated_bytes = static_cast<int64_t>(e.info().allocated_bytes);
    result_.oom_reserved_bytes = static_cast<int64_t>(e.info().reserved_bytes);
    return false;
  }
  const TimeNs now = host_now_;  // a synchronize() may have advanced it
  const auto bytes = static_cast<int64_t>(live_[static_cast<size_t>(buffer)]->bytes);
  allocated_ += bytes;
  requested_ += b.bytes;
  result_.peak_requested_bytes = std::max(result_.peak_requested_bytes, requested_);
  live_by_category_[static_cast<size_t>(b.category)] += bytes;
  live_by_unit_[unit_slot(b.unit)] += bytes;
  emit_memory(now, bytes, live_[static_cast<size_t>(buffer)]->address,
              static_cast<size_t>(b.stream), b.category);
  record_peak(now);
  return true;
}

// cuBLAS / cuBLASLt workspaces (HardwareModel::blas_workspace_bytes): one
// block per (handle, stream) from PyTorch's caching allocator, taken at the
// first GEMM that handle runs and never freed: workspace 0 at the first
// forward GEMM (the main thread's handle), the others at the first backward
// one (the autograd device thread's handle; recomputes run there too). They
// are not tensors: outside allocated_ (peak_allocated_bytes, comparable with
// the CPU references and FSDPMemTracker), inside reserved.
//
// Where they land depends on the cache of the first step, and the measured
// step inherits that cache: on gpt2-small the backward workspace (32 MiB)
// splits the free 1.65 GB block the loss left, which can then never hold a
// 1.65 GB block again, and every later step needs a fourth such segment
// (tests/reference/cuda/snapshots: one 32 MiB segment, four 1.65 GB ones).
// So this warm-up replays the step's allocations and frees once, in host
// order, each free reusable at once (fsdp2's frees wait on no event; fsdp1's
// record_stream uses are not delayed here), placing the workspaces; the
// simulated step then starts from the warm cache, as PyTorch's measured step
// does. Without workspaces (cpu-local, or blas_workspaces 0) there is no
// warm-up: the step starts from an empty cache, as the engines' first step.
bool Executor::warm_up_with_blas_workspaces() {
  const int stream = sched_.stream_index(plan::StreamRole::compute);
  if (stream < 0 || hw_.blas_workspace_bytes <= 0 || hw_.blas_workspaces <= 0) return true;
  std::vector<alloc::Allocation> workspaces;
  std::string what;
  const auto allocate_or_fail = [&](uint64_t bytes, alloc::StreamId on) {
    try {
      return std::optional<alloc::Allocation>(allocator_.allocate(bytes, on));
    } catch (const alloc::OutOfMemory& e) {
      result_.fits = false;
      result_.oom_buffer = what;
      result_.oom_bytes = static_cast<int64_t>(bytes);
      result_.oom_message = e.what();
      result_.oom_rank = rank_id_;
      result_.oom_allocated_bytes = static_cast<int64_t>(e.info().allocated_bytes);
      result_.oom_reserved_bytes = static_cast<int64_t>(e.info().reserved_bytes);
      return std::optional<alloc::Allocation>();
    }
  };
  const auto place = [&](int64_t upto) {
    while (static_cast<int64_t>(workspaces.size()) < upto) {
      what = "cuBLAS workspace " + std::to_string(workspaces.size());
      current_buffer_ = AllocatorHistory::kBlasWorkspace;
      const auto a = allocate_or_fail(static_cast<uint64_t>(hw_.blas_workspace_bytes),
                                      static_cast<alloc::StreamId>(stream));
      current_buffer_ = -1;
      if (!a) return false;
      workspaces.push_back(*a);
    }
    return true;
  };
  std::vector<std::optional<alloc::Allocation>> live(sched_.buffers.size());
  allocator_.set_time(0);
  bool ok = true;
  for (size_t i = 0; ok && i < sched_.actions.size(); ++i) {
    const plan::Action& action = sched_.actions[i];
    if (action.kind == plan::ActionKind::launch) {
      const plan::ScheduleOp& op = sched_.ops[static_cast<size_t>(action.op)];
      if (op.graph_op >= 0 &&
          graph_.ops[static_cast<size_t>(op.graph_op)].type == plan::OpType::linear)
        ok = place(op.phase == plan::Phase::forward ? 1 : hw_.blas_workspaces);
      continue;
    }
    if (action.kind != plan::ActionKind::alloc && action.kind != plan::ActionKind::free) continue;
    const auto b = static_cast<size_t>(action.buffer);
    const plan::Buffer& buf = sched_.buffers[b];
    if (buf.on_host || buf.persistent) continue;
    if (action.kind == plan::ActionKind::alloc) {
      what = plan::buffer_name(graph_, buf);
      current_buffer_ = static_cast<int>(b);
      live[b] = allocate_or_fail(static_cast<uint64_t>(buf.bytes),
                                 static_cast<alloc::StreamId>(buf.stream));
      current_buffer_ = -1;
      ok = live[b].has_value();
    } else if (live[b]) {
      current_buffer_ = static_cast<int>(b);
      allocator_.free(live[b]->handle);
      current_buffer_ = -1;
      live[b].reset();
    }
  }
  for (size_t b = 0; b < live.size(); ++b)
    if (live[b]) {
      current_buffer_ = static_cast<int>(b);
      allocator_.free(live[b]->handle);
      current_buffer_ = -1;
    }
  if (!ok) {
    // The first step itself runs out of memory (the allocator already
    // released its cache and retried): simulate that step instead, from a
    // cold cache with the workspaces taken first, so that it stops at its
    // own failed allocation with its events up to there.
    for (const alloc::Allocation& w : workspaces) allocator_.free(w.handle);
    workspaces.clear();
    allocator_.empty_cache();
    result_.fits = true;
    result_.oom_buffer.clear();
    result_.oom_bytes = result_.oom_allocated_bytes = result_.oom_reserved_bytes = 0;
    result_.oom_message.clear();
    result_.oom_rank = -1;
    if (!place(hw_.blas_workspaces)) return false;
  }
  for (const alloc::Allocation& w : workspaces)
    result_.blas_workspace_bytes += static_cast<int64_t>(w.bytes);
  record_peak(TimeNs(0));  // a step without a linear op holds no workspace
  return true;
}

void Executor::record_peak(TimeNs now) {
  const auto reserved = static_cast<int64_t>(allocator_.counters().reserved.current);
  if (reserved > result_.peak_reserved_bytes) result_.peak_reserved_bytes = reserved;
  if (allocated_ <= result_.peak_allocated_bytes) return;
  result_.peak_allocated_bytes = allocated_;
  result_.peak.time = now;
  result_.peak.allocated_bytes = allocated_;
  peak_by_category_ = live_by_category_;
  peak_by_unit_ = live_by_unit_;
}

void Executor::release(int buffer, const plan::SmallVector<int, 4>& pending) {
  const TimeNs now = host_now_;
  const plan::Buffer& b = sched_.buffers.at(static_cast<size_t>(buffer));
  if (b.on_host) return;
  auto& slot = live_[static_cast<size_t>(buffer)];
  if (!slot)
    throw Error("schedule frees buffer '" + plan::buffer_name(graph_, b) +
                "' that is not allocated");
  std::vector<alloc::EventId> events;
  for (int op : pending)
    if (!done_.at(static_cast<size_t>(op))) events.push_back(static_cast<alloc::EventId>(op) + 1);
  allocator_.set_time(now.ns);
  current_buffer_ = buffer;
  allocator_.free(slot->handle, events);
  current_buffer_ = -1;
  const auto bytes = static_cast<int64_t>(slot->bytes);
  allocated_ -= bytes;
  requested_ -= b.bytes;
  live_by_category_[static_cast<size_t>(b.category)] -= bytes;
  live_by_unit_[unit_slot(b.unit)] -= bytes;
  emit_memory(now, -bytes, slot->address, static_cast<size_t>(b.stream), b.category);
  slot.reset();
}

int64_t Executor::host_dispatch_ns(int op) const {
  const OpLevelModel& level = hw_.op_level;
  if (level.host_dispatch_ns.empty() && level.host_dispatch_per_param_ns.empty()) return 0;
  const plan::ScheduleOp& o = sched_.ops[static_cast<size_t>(op)];
  if (o.graph_op >= 0) {
    const plan::Op& g = graph_.ops[static_cast<size_t>(o.graph_op)];
    const bool backward = o.kind == plan::OpKind::backward;
    return level.host_dispatch_ns_of(efficiency_key(plan::op_type_name(g.type), backward),
                                     !backward, 1);
  }
  // FSDP2's copy-in (the ag_copy_in stream) casts and copies each parameter
  // of its unit; every other op, FSDP1's flat-parameter cast included, is one.
  int64_t params = 1;
  if (o.unit >= 0 && o.unit < static_cast<int>(units_.units.size()) &&
      sched_.stream_roles[static_cast<size_t>(o.stream)] == plan::StreamRole::ag_copy_in)
    params = static_cast<int64_t>(units_.units[static_cast<size_t>(o.unit)].params.size());
  return level.host_dispatch_ns_of(plan::op_kind_name(o.kind), false, params);
}

bool Executor::run_host(TimeNs resume) {
  host_now_ = resume;
  while (next_action_ < sched_.actions.size()) {
    const plan::Action& a = sched_.actions[next_action_];
    switch (a.kind) {
      case plan::ActionKind::launch: {
        const bool device_op =
            sched_
                .stream_roles[static_cast<size_t>(sched_.ops[static_cast<size_t>(a.op)].stream)] !=
            plan::StreamRole::host;
        if (device_op && !overhead_paid_ && queued_device_ops_ >= hw_.launch_queue_depth) {
          // CUDA's launch queue is full: the launch blocks until an op finishes.
          queue_full_ = true;
          queue_full_since_ = host_now_;
          return true;
        }
        if (!overhead_paid_) {
          // The host's time for this launch: the launch itself, and what the
          // framework does on the host before it (op_level host dispatch).
          const int64_t dispatch = host_dispatch_ns(a.op);
          if (hw_.launch_overhead_ns > 0 || dispatch > 0) {
            overhead_paid_ = true;
            push(later(later(host_now_, TimeNs(hw_.launch_overhead_ns)), TimeNs(dispatch)),
                 EventType::host_resume);
            return true;
          }
        }
        overhead_paid_ = false;
        const auto op = static_cast<size_t>(a.op);
        if (launched_.at(op))
          throw Error("schedule launches op " + std::to_string(a.op) + " twice");
        launched_[op] = 1;
        if (device_op) ++queued_device_ops_;
        stream_queue_.at(static_cast<size_t>(sched_.ops[op].stream)).push_back(a.op);
        break;
      }
      case plan::ActionKind::host_wait: {
        const auto op = static_cast<size_t>(a.op);
        if (!launched_.at(op))
          throw Error("host_wait on op " + std::to_string(a.op) + " that was never launched");
        if (!done_[op]) {
          waiting_on_ = a.op;
          wait_started_ = host_now_;
          ++next_action_;
          return true;
        }
        break;
      }
      case plan::ActionKind::alloc:
        if (!allocate(a.buffer)) return false;
        break;
      case plan::ActionKind::free:
        release(a.buffer, a.pending_ops);
        break;
    }
    ++next_action_;
  }
  host_done_ = true;
  host_end_ = host_now_;
  return true;
}

bool Executor::ready(int op) const {
  const plan::ScheduleOp& o = sched_.ops[static_cast<size_t>(op)];
  for (int w : o.waits)
    if (!done_.at(static_cast<size_t>(w))) return false;
  if (plan::is_collective(o.kind)) {
    const auto g = static_cast<size_t>(o.group);
    if (group_busy_.at(g) || group_next_seq_[g] != o.seq) return false;
  }
  return true;
}

void Executor::start(int op, TimeNs now) {
  const plan::ScheduleOp& o = sched_.ops[static_cast<size_t>(op)];
  TimeNs dur = cost_.duration(op);
  const bool collective = plan::is_collective(o.kind);
  if (collective) {
    const auto g = static_cast<size_t>(o.group);
    group_busy_[g] = 1;
    ++group_next_seq_[g];
    ++active_collectives_;
  } else if (plan::is_compute(o.kind) && active_collectives_ > 0 && hw_.contention_factor != 1.0) {
    // Beyond int64: -1, which later() below refuses with the hardware's name.
    const double slowed = static_cast<double>(dur.ns) * hw_.contention_factor;
    dur = slowed < 9e18 ? TimeNs(static_cast<int64_t>(std::llround(slowed))) : TimeNs(-1);
  }
  // A non-collective device op starts op_dispatch_ns after it could: its
  // stream is held (idle) meanwhile.
  if (!collective && hw_.op_dispatch_ns > 0 &&
      sched_.stream_roles[static_cast<size_t>(o.stream)] != plan::StreamRole::host)
    now = later(now, TimeNs(hw_.op_dispatch_ns));
  started_[static_cast<size_t>(op)] = 1;
  stream_running_[static_cast<size_t>(o.stream)] = op;
  result_.op_start[static_cast<size_t>(op)] = now;
  push(later(now, dur), EventType::op_finish, op);

  const size_t lane = static_cast<size_t>(o.stream);
  if (!trace_) {
    emit_event(lane, plan::trace_category(o.kind), now, dur);
    return;
  }
  std::string name;
  uint32_t op_type = 0;
  if (o.graph_op >= 0) {
    const plan::Op& g = graph_.ops[static_cast<size_t>(o.graph_op)];
    name = g.name + (o.kind == plan::OpKind::backward    ? " bwd"
                     : o.kind == plan::OpKind::recompute ? " recompute"
                                                         : " fwd");
    op_type = intern(plan::op_type_name(g.type));
  } else {
    name = std::string(plan::op_kind_name(o.kind));
    if (o.unit >= 0) name += " " + unit_name(o.unit);
    op_type = intern(plan::op_kind_name(o.kind));
  }
  const uint32_t unit_id = o.unit >= 0 ? intern(unit_name(o.unit)) : traces::kNoString;
  emit_event(lane, plan::trace_category(o.kind), now, dur, intern(name), unit_id, op_type,
             static_cast<uint64_t>(std::llround(cost_.bytes(op))),
             static_cast<uint64_t>(std::llround(cost_.flops(op))));
  const auto index = static_cast<uint32_t>(rank_->events.size() - 1);
  op_event_[static_cast<size_t>(op)] = index;
  for (int w : o.waits)
    if (sched_.ops[static_cast<size_t>(w)].stream != o.stream)
      rank_->flows.push_back(traces::Flow{op_event_[static_cast<size_t>(w)], index});
}

void Executor::start_ready(TimeNs now) {
  // Collectives first: a compute op starting at this instant then sees them.
  for (int pass = 0; pass < 2; ++pass) {
    bool progress = true;
    while (progress) {
      progress = false;
      for (size_t s = 0; s < stream_queue_.size(); ++s) {
        if (stream_running_[s] >= 0 || stream_queue_[s].empty()) continue;
        const int op = stream_queue_[s].front();
        const bool collective = plan::is_collective(sched_.ops[static_cast<size_t>(op)].kind);
        if ((pass == 0) != collective || !ready(op)) continue;
        stream_queue_[s].pop_front();
        start(op, now);
        progress = true;
      }
    }
  }
}

void Executor::finish_op(int op, TimeNs now) {
  const plan::ScheduleOp& o = sched_.ops[static_cast<size_t>(op)];
  done_[static_cast<size_t>(op)] = 1;
  result_.op_end[static_cast<size_t>(op)] = now;
  stream_running_[static_cast<size_t>(o.stream)] = -1;
  ++result_.sim_events;
  if (sched_.stream_roles[static_cast<size_t>(o.stream)] != plan::StreamRole::host) {
    --queued_device_ops_;
    if (queue_full_) {
      queue_full_ = false;
      if (now > queue_full_since_)
        emit_event(host_lane_, traces::Category::sync, queue_full_since_, now - queue_full_since_,
                   intern("launch queue full"));
      push(now, EventType::host_resume);
    }
  }
  if (plan::is_collective(o.kind)) {
    group_busy_[static_cast<size_t>(o.group)] = 0;
    --active_collectives_;
  }
  if (!in_sync_) {
    allocator_.set_time(now.ns);
    allocator_.event_completed(static_cast<alloc::EventId>(op) + 1);
  }
  if (waiting_on_ == op) {
    waiting_on_ = -1;
    if (now > wait_started_)
      emit_event(host_lane_, traces::Category::sync, wait_started_, now - wait_started_,
                 intern("host_wait"));
    push(now, EventType::host_resume);
  }
}

bool Executor::synchronize(const std::vector<alloc::EventId>& outstanding) {
  auto pending = [&] {
    for (alloc::EventId id : outstanding)
      if (id >= 1 && id <= done_.size() && !done_[static_cast<size_t>(id - 1)]) return true;
    return false;
  };
  const TimeNs start = host_now_;
  in_sync_ = true;
  // Ops launched since the host resumed have not been offered to their streams yet.
  start_ready(host_now_);
  // While the host runs actions only op completions are queued.
  while (pending() && !heap_.empty() && heap_.top().type == EventType::op_finish) {
    const SimEvent e = heap_.top();
    heap_.pop();
    host_now_ = max(host_now_, e.time);
    finish_op(e.op, e.time);
    start_ready(e.time);
  }
  in_sync_ = false;
  if (pending()) return false;
  if (host_now_ > start)
    emit_event(host_lane_, traces::Category::sync, start, host_now_ - start,
               intern("allocator synchronize"));
  allocator_.set_time(host_now_.ns);
  return true;
}

SimResult Executor::run() {
  const size_t n_ops = sched_.ops.size();
  launched_.assign(n_ops, 0);
  started_.assign(n_ops, 0);
  done_.assign(n_ops, 0);
  op_event_.assign(n_ops, 0);
  result_.op_start.assign(n_ops, TimeNs(-1));
  result_.op_end.assign(n_ops, TimeNs(-1));
  stream_queue_.assign(sched_.streams.size(), {});
  stream_running_.assign(sched_.streams.size(), -1);
  group_next_seq_.assign(sched_.groups.size(), 0);
  group_busy_.assign(sched_.groups.size(), 0);
  live_.assign(sched_.buffers.size(), std::nullopt);
  live_by_category_.assign(kCategories, 0);
  live_by_unit_.assign(units_.units.size() + 1, 0);
  if (sched_.stream_roles.size() != sched_.streams.size())
    throw Error("schedule: streams and stream_roles differ in length");

  for (size_t s = 0; s < sched_.streams.size(); ++s)
    lane_kinds_.push_back(plan::trace_lane_kind(sched_.stream_roles[s]));
  lane_kinds_.push_back(traces::LaneKind::host);
  host_lane_ = lane_kinds_.size() - 1;
  if (trace_) {
    rank_ = &trace_->add_rank(rank_id_);
    rank_->represents = represents_;
    for (size_t s = 0; s < sched_.streams.size(); ++s)
      lanes_.push_back(
          trace_->add_lane(*rank_, sched_.streams[s], lane_kinds_[s], static_cast<int32_t>(s)));
    lanes_.push_back(trace_->add_lane(*rank_, "host", traces::LaneKind::host));
  } else {
    acc_->add_rank(rank_id_, represents_);
    // The step the trace records (below), so both give the same step time:
    // its end is set when the step is done.
    acc_->add_step(rank_id_, traces::Step{0, 0, 0});
  }

  // Persistent buffers exist before the step: allocated at time 0.
  bool ok = true;
  for (size_t b = 0; b < sched_.buffers.size() && ok; ++b) {
    const plan::Buffer& buf = sched_.buffers[b];
    if (!buf.persistent || buf.on_host) continue;
    result_.persistent_bytes += buf.bytes;
    ok = allocate(static_cast<int>(b));
  }

  if (ok) ok = warm_up_with_blas_workspaces();

  if (ok) push(TimeNs(0), EventType::host_resume);
  TimeNs now(0);
  while (ok && !heap_.empty()) {
    const SimEvent e = heap_.top();
    heap_.pop();
    now = e.time;
    if (e.type == EventType::host_resume) {
      ok = run_host(now);
      now = host_now_;
    } else
      finish_op(e.op, now);
    if (ok) start_ready(now);
  }

  if (ok) {
    if (!host_done_) throw Error("simulation stalled: the host never finished its actions");
    for (size_t op = 0; op < n_ops; ++op)
      if (launched_[op] && !done_[op])
        throw Error("simulation stalled: op " + std::to_string(op) + " (" +
                    plan::op_kind_name(sched_.ops[op].kind) + ") never ran");
  }
  TimeNs end = host_done_ ? host_end_ : now;
  for (size_t op = 0; op < n_ops; ++op) end = max(end, result_.op_end[op]);
  result_.step_time = end;
  for (size_t c = 0; c < peak_by_category_.size(); ++c)
    if (peak_by_category_[c])
      result_.peak.by_category[plan::buffer_category_name(static_cast<plan::BufferCategory>(c))] =
          peak_by_category_[c];
  for (size_t u = 0; u < peak_by_unit_.size(); ++u)
    if (peak_by_unit_[u]) result_.peak.by_unit[unit_name(static_cast<int>(u))] = peak_by_unit_[u];
  if (acc_) acc_->end_step(rank_id_, end.ns);
  if (trace_) {
    rank_->steps.push_back(traces::Step{0, 0, end.ns});
    traces::sort_events(*rank_);
  }
  return std::move(result_);
}

}  // namespace

namespace {

struct RankClass {
  std::vector<GroupSpan> spans;  // per schedule group, as the class's ranks see them
  std::vector<int32_t> ranks;
};

// Partitions the world into classes of ranks whose groups have equal spans.
std::vector<RankClass> rank_classes(const plan::Schedule& s, const HardwareModel& hw) {
  std::vector<GroupSpan> own;
  own.reserve(s.groups.size());
  for (const plan::ProcessGroup& g : s.groups) own.push_back(group_span(g.ranks, hw.gpus_per_node));
  const plan::RankGroups rg = plan::rank_groups(s);
  std::vector<RankClass> classes;
  std::vector<GroupSpan> key(rg.used.size());
  auto class_of = [&](const std::vector<GroupSpan>& k) -> RankClass& {
    for (RankClass& c : classes) {
      bool same = true;
      for (size_t i = 0; i < k.size() && same; ++i)
        same = c.spans[static_cast<size_t>(rg.used[i])] == k[i];
      if (same) return c;
    }
    RankClass c;
    c.spans = own;
    for (size_t i = 0; i < k.size(); ++i) c.spans[static_cast<size_t>(rg.used[i])] = k[i];
    classes.push_back(std::move(c));
    return classes.back();
  };
  // The schedule's own rank first: its class is classes[0].
  const auto world = static_cast<int32_t>(s.world.world_size);
  for (int32_t i = 0; i < world; ++i) {
    const int32_t r = (s.rank + i) % world;
    for (size_t j = 0; j < key.size(); ++j)
      key[j] = own[static_cast<size_t>(rg.of_rank[static_cast<size_t>(r)][j])];
    class_of(key).ranks.push_back(r);
  }
  for (RankClass& c : classes) {
    std::sort(c.ranks.begin() + 1, c.ranks.end());
  }
  return classes;
}

}  // namespace

SimResult simulate(const plan::Graph& graph, const plan::UnitPlan& units,
                   const plan::Schedule& schedule, const HardwareModel& hw,
                   const SimOptions& options) {
  hw.validate();
  if (schedule.stream_roles.size() != schedule.streams.size())
    throw Error("schedule: streams and stream_roles differ in length");
  std::vector<RankClass> classes = rank_classes(schedule, hw);

  traces::Trace trace;
  traces::MetricsAccumulator acc;
  traces::Trace* t = options.record_trace ? &trace : nullptr;
  const traces::Source source = traces::Source::simulator;
  if (t) {
    t->meta.source = source;
    t->meta.model = options.model_name.empty() ? graph.model_name : options.model_name;
    t->meta.policy_json = options.policy_json;
    t->meta.hardware = options.hardware_name.empty() ? hw.name : options.hardware_name;
    t->meta.world_size = static_cast<int32_t>(schedule.world.world_size);
    t->meta.tool_versions["shardscope-sim"] = version();
    t->meta.clock_alignment = "none";
  } else {
    acc.set_source(source);
    acc.set_world_size(static_cast<int32_t>(schedule.world.world_size));
  }

  SimResult out;
  for (size_t c = 0; c < classes.size(); ++c) {
    RankClass& rc = classes[c];
    const int32_t rank = rc.ranks.front();
    std::vector<int32_t> represents = rc.ranks;
    std::sort(represents.begin(), represents.end());
    Executor ex(graph, units, schedule, hw, options, std::move(rc.spans), rank, represents, t,
                t ? nullptr : &acc);
    if (c == 0 && options.allocator_history) ex.record_allocator(options.allocator_history);
    SimResult r = ex.run();
    RankClassResult summary;
    summary.rank = rank;
    summary.represents = std::move(represents);
    summary.fits = r.fits;
    summary.step_time = r.step_time;
    summary.peak_allocated_bytes = r.peak_allocated_bytes;
    summary.peak_reserved_bytes = r.peak_reserved_bytes;
    summary.peak_requested_bytes = r.peak_requested_bytes;
    const uint64_t events = r.sim_events;
    if (c == 0) {
      out = std::move(r);
    } else {
      if (out.fits && !r.fits) {
        out.fits = false;
        out.oom_buffer = r.oom_buffer;
        out.oom_bytes = r.oom_bytes;
        out.oom_message = "rank " + std::to_string(rank) + ": " + r.oom_message;
        out.oom_rank = r.oom_rank;
        out.oom_allocated_bytes = r.oom_allocated_bytes;
        out.oom_reserved_bytes = r.oom_reserved_bytes;
      }
      out.step_time = max(out.step_time, r.step_time);
      if (r.peak_allocated_bytes > out.peak_allocated_bytes) {
        out.peak_allocated_bytes = r.peak_allocated_bytes;
        out.peak = r.peak;
      }
      out.peak_reserved_bytes = std::max(out.peak_reserved_bytes, r.peak_reserved_bytes);
      out.peak_requested_bytes = std::max(out.peak_requested_bytes, r.peak_requested_bytes);
      out.sim_events += events;
    }
    out.rank_classes.push_back(std::move(summary));
  }
  if (t) {
    out.metrics = traces::compute_metrics(trace);
    out.trace = std::move(trace);
  } else {
    out.metrics = acc.finish();
  }
  return out;
}

}  // namespace shardscope::sim
