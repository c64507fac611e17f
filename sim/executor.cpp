#include "sim/executor.h"

#include <algorithm>
#include <cmath>

#include "plan/trace_vocabulary.h"

namespace shardscope::sim::detail {

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

int64_t Executor::host_dispatch_ns(int op) const {
  const OpLevelModel& level = hw_.op_level;
  if (level.host_dispatch_ns.empty() && level.host_dispatch_per_param_ns.empty()) return 0;
  const plan::ScheduleOp& o = sched_.ops[static_cast<size_t>(op)];
  if (o.graph_op >= 0) {
    const plan::Op& g = graph_.ops[static_cast<size_t>(o.graph_op)];
    const bool backward = o.kind == plan::OpKind::backward;
    return level.host_dispatch_ns_of(efficiency_key(cost_op_type(g), backward), !backward, 1);
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

}  // namespace shardscope::sim::detail
