#include "sim/simulator.h"

#include <cmath>
#include <deque>
#include <optional>
#include <queue>

#include "alloc/backing.h"
#include "alloc/caching_allocator.h"
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

traces::Category trace_category(plan::OpKind kind) {
  switch (kind) {
    case plan::OpKind::all_gather:
      return traces::Category::comm_all_gather;
    case plan::OpKind::reduce_scatter:
      return traces::Category::comm_reduce_scatter;
    case plan::OpKind::all_reduce:
      return traces::Category::comm_all_reduce;
    case plan::OpKind::h2d:
      return traces::Category::memcpy_h2d;
    case plan::OpKind::d2h:
      return traces::Category::memcpy_d2h;
    default:
      return traces::Category::compute;
  }
}

traces::LaneKind lane_kind(plan::StreamRole role) {
  switch (role) {
    case plan::StreamRole::host:
      return traces::LaneKind::host;
    case plan::StreamRole::compute:
      return traces::LaneKind::compute;
    case plan::StreamRole::unshard:
    case plan::StreamRole::all_gather:
    case plan::StreamRole::reduce_scatter:
    case plan::StreamRole::all_reduce:
      return traces::LaneKind::comm;
    case plan::StreamRole::pre_unshard:
    case plan::StreamRole::ag_copy_in:
      return traces::LaneKind::copy;
  }
  return traces::LaneKind::other;
}

class Executor final : public alloc::EventSource {
 public:
  Executor(const plan::Graph& graph, const plan::UnitPlan& units, const plan::Schedule& schedule,
           const HardwareModel& hw, const SimOptions& options)
      : graph_(graph),
        units_(units),
        sched_(schedule),
        hw_(hw),
        options_(options),
        cost_(hw, graph, schedule),
        backing_(static_cast<uint64_t>(options.memory_limit_bytes > 0 ? options.memory_limit_bytes
                                                                      : hw.memory_bytes)),
        allocator_(backing_) {
    allocator_.set_event_source(this);
  }

  SimResult run();

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
  bool run_host(TimeNs now);  // false: out of memory
  void finish_op(int op, TimeNs now);
  void start_ready(TimeNs now);
  bool ready(int op) const;
  void start(int op, TimeNs now);
  bool allocate(int buffer);  // at host_now_
  void release(int buffer, const std::vector<int>& pending);
  void record_peak(TimeNs now);
  std::string unit_name(int unit) const {
    return unit >= 0 && unit < static_cast<int>(units_.units.size())
               ? units_.units[static_cast<size_t>(unit)].name
               : std::string("<none>");
  }

  const plan::Graph& graph_;
  const plan::UnitPlan& units_;
  const plan::Schedule& sched_;
  const HardwareModel& hw_;
  const SimOptions& options_;
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
  std::map<std::string, int64_t> live_by_category_, live_by_unit_;

  SimResult result_;
  traces::RankTrace* rank_ = nullptr;
  std::vector<uint32_t> lanes_;
  uint32_t host_lane_ = 0;
};

bool Executor::allocate(int buffer) {
  const plan::Buffer& b = sched_.buffers.at(static_cast<size_t>(buffer));
  if (b.on_host) return true;
  if (live_[static_cast<size_t>(buffer)])
    throw Error("schedule allocates buffer '" + b.name + "' twice");
  allocator_.set_time(host_now_.ns);
  try {
    live_[static_cast<size_t>(buffer)] =
        allocator_.allocate(static_cast<uint64_t>(b.bytes), static_cast<alloc::StreamId>(b.stream),
                            static_cast<uint32_t>(b.category));
  } catch (const alloc::OutOfMemory& e) {
    result_.fits = false;
    result_.oom_buffer = b.name;
    result_.oom_bytes = b.bytes;
    result_.oom_message = e.what();
    return false;
  }
  const TimeNs now = host_now_;  // a synchronize() may have advanced it
  const auto bytes = static_cast<int64_t>(live_[static_cast<size_t>(buffer)]->bytes);
  allocated_ += bytes;
  live_by_category_[plan::buffer_category_name(b.category)] += bytes;
  live_by_unit_[unit_name(b.unit)] += bytes;
  traces::add_allocation(*rank_, now.ns, bytes, live_[static_cast<size_t>(buffer)]->address,
                         lanes_[static_cast<size_t>(b.stream)], memory_category(b.category),
                         static_cast<int64_t>(allocator_.counters().reserved.current));
  record_peak(now);
  return true;
}

void Executor::record_peak(TimeNs now) {
  const auto reserved = static_cast<int64_t>(allocator_.counters().reserved.current);
  if (reserved > result_.peak_reserved_bytes) result_.peak_reserved_bytes = reserved;
  if (allocated_ <= result_.peak_allocated_bytes) return;
  result_.peak_allocated_bytes = allocated_;
  result_.peak.time = now;
  result_.peak.allocated_bytes = allocated_;
  result_.peak.by_category.clear();
  for (const auto& [k, v] : live_by_category_)
    if (v) result_.peak.by_category[k] = v;
  result_.peak.by_unit.clear();
  for (const auto& [k, v] : live_by_unit_)
    if (v) result_.peak.by_unit[k] = v;
}

void Executor::release(int buffer, const std::vector<int>& pending) {
  const TimeNs now = host_now_;
  const plan::Buffer& b = sched_.buffers.at(static_cast<size_t>(buffer));
  if (b.on_host) return;
  auto& slot = live_[static_cast<size_t>(buffer)];
  if (!slot) throw Error("schedule frees buffer '" + b.name + "' that is not allocated");
  std::vector<alloc::EventId> events;
  for (int op : pending)
    if (!done_.at(static_cast<size_t>(op))) events.push_back(static_cast<alloc::EventId>(op) + 1);
  allocator_.set_time(now.ns);
  allocator_.free(slot->handle, events);
  const auto bytes = static_cast<int64_t>(slot->bytes);
  allocated_ -= bytes;
  live_by_category_[plan::buffer_category_name(b.category)] -= bytes;
  live_by_unit_[unit_name(b.unit)] -= bytes;
  traces::add_allocation(*rank_, now.ns, -bytes, slot->address,
                         lanes_[static_cast<size_t>(b.stream)], memory_category(b.category),
                         static_cast<int64_t>(allocator_.counters().reserved.current));
  slot.reset();
}

bool Executor::run_host(TimeNs resume) {
  host_now_ = resume;
  while (next_action_ < sched_.actions.size()) {
    const plan::Action& a = sched_.actions[next_action_];
    switch (a.kind) {
      case plan::ActionKind::launch: {
        if (hw_.launch_overhead_ns > 0 && !overhead_paid_) {
          overhead_paid_ = true;
          push(host_now_ + TimeNs(hw_.launch_overhead_ns), EventType::host_resume);
          return true;
        }
        overhead_paid_ = false;
        const auto op = static_cast<size_t>(a.op);
        if (launched_.at(op))
          throw Error("schedule launches op " + std::to_string(a.op) + " twice");
        launched_[op] = 1;
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
    dur = TimeNs(
        static_cast<int64_t>(std::llround(static_cast<double>(dur.ns) * hw_.contention_factor)));
  }
  started_[static_cast<size_t>(op)] = 1;
  stream_running_[static_cast<size_t>(o.stream)] = op;
  result_.op_start[static_cast<size_t>(op)] = now;
  push(now + dur, EventType::op_finish, op);

  // Trace event.
  traces::Trace& t = result_.trace;
  std::string name;
  uint32_t op_type = 0;
  if (o.graph_op >= 0) {
    const plan::Op& g = graph_.ops[static_cast<size_t>(o.graph_op)];
    name = g.name + (o.kind == plan::OpKind::backward    ? " bwd"
                     : o.kind == plan::OpKind::recompute ? " recompute"
                                                         : " fwd");
    op_type = t.intern(g.type);
  } else {
    name = std::string(plan::op_kind_name(o.kind));
    if (o.unit >= 0) name += " " + unit_name(o.unit);
    op_type = t.intern(plan::op_kind_name(o.kind));
  }
  const uint32_t name_id = t.intern(name);
  const uint32_t unit_id = o.unit >= 0 ? t.intern(unit_name(o.unit)) : traces::kNoString;
  traces::Event& e = traces::add_event(*rank_, lanes_[static_cast<size_t>(o.stream)], name_id,
                                       trace_category(o.kind), now.ns, dur.ns);
  e.unit = unit_id;
  e.op = op_type;
  e.bytes = static_cast<uint64_t>(std::llround(cost_.bytes(op)));
  e.flops = static_cast<uint64_t>(std::llround(cost_.flops(op)));
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
      traces::add_event(*rank_, host_lane_, result_.trace.intern("host_wait"),
                        traces::Category::sync, wait_started_.ns, (now - wait_started_).ns);
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
    traces::add_event(*rank_, host_lane_, result_.trace.intern("allocator synchronize"),
                      traces::Category::sync, start.ns, (host_now_ - start).ns);
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
  if (sched_.stream_roles.size() != sched_.streams.size())
    throw Error("schedule: streams and stream_roles differ in length");

  traces::Trace& t = result_.trace;
  t.meta.source = traces::Source::simulator;
  t.meta.model = options_.model_name.empty() ? graph_.model_name : options_.model_name;
  t.meta.policy_json = options_.policy_json;
  t.meta.hardware = options_.hardware_name.empty() ? hw_.name : options_.hardware_name;
  t.meta.world_size = static_cast<int32_t>(sched_.world.world_size);
  t.meta.tool_versions["shardscope-sim"] = version();
  t.meta.clock_alignment = "none";
  rank_ = &t.add_rank(sched_.rank);
  for (int64_t r = 0; r < sched_.world.world_size; ++r)
    rank_->represents.push_back(static_cast<int32_t>(r));
  for (size_t s = 0; s < sched_.streams.size(); ++s)
    lanes_.push_back(t.add_lane(*rank_, sched_.streams[s], lane_kind(sched_.stream_roles[s]),
                                static_cast<int32_t>(s)));
  host_lane_ = t.add_lane(*rank_, "host", traces::LaneKind::host);

  // Persistent buffers exist before the step: allocated at time 0.
  bool ok = true;
  for (size_t b = 0; b < sched_.buffers.size() && ok; ++b) {
    const plan::Buffer& buf = sched_.buffers[b];
    if (!buf.persistent || buf.on_host) continue;
    result_.persistent_bytes += buf.bytes;
    ok = allocate(static_cast<int>(b));
  }

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
  rank_->steps.push_back(traces::Step{0, 0, end.ns});
  traces::sort_events(*rank_);
  result_.metrics = traces::compute_metrics(t);
  return std::move(result_);
}

}  // namespace

traces::MemoryCategory memory_category(plan::BufferCategory category) {
  switch (category) {
    case plan::BufferCategory::parameters:
    case plan::BufferCategory::unsharded_params:
      return traces::MemoryCategory::parameters;
    case plan::BufferCategory::gradients:
    case plan::BufferCategory::unsharded_grads:
      return traces::MemoryCategory::gradients;
    case plan::BufferCategory::optimizer_state:
      return traces::MemoryCategory::optimizer_state;
    case plan::BufferCategory::comm_buffers:
      return traces::MemoryCategory::comm_buffers;
    case plan::BufferCategory::activations:
      return traces::MemoryCategory::activations;
    case plan::BufferCategory::workspace:
      return traces::MemoryCategory::temporaries;
  }
  return traces::MemoryCategory::other;
}

SimResult simulate(const plan::Graph& graph, const plan::UnitPlan& units,
                   const plan::Schedule& schedule, const HardwareModel& hw,
                   const SimOptions& options) {
  hw.validate();
  Executor ex(graph, units, schedule, hw, options);
  return ex.run();
}

}  // namespace shardscope::sim
