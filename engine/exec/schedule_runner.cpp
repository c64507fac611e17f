#include "engine/exec/schedule_runner.h"

#include <algorithm>

#include "alloc/errors.h"
#include "engine/exec/exec_error.h"
#include "engine/exec/schedule_info.h"
#include "plan/schedule_costs.h"
#include "plan/trace_vocabulary.h"
#include "profiler/host_clock.h"

namespace shardscope::engine::exec {

using plan::ActionKind;

ScheduleRunner::ScheduleRunner(const plan::Graph& graph, const plan::UnitPlan& units,
                               const plan::Schedule& schedule, alloc::CachingAllocator& allocator,
                               RunnerBackend& backend, traces::Source source, bool label_errors)
    : g_(graph),
      up_(units),
      s_(schedule),
      allocator_(allocator),
      backend_(backend),
      label_errors_(label_errors),
      sizes_(plan::workload_sizes(graph, schedule.workload)) {
  const size_t nb = s_.buffers.size();
  live_.resize(nb);
  host_.assign(nb, nullptr);
  pending_init_.assign(nb, FirstUse::none);
  zero_at_alloc_.assign(nb, 0);
  // Recording: one lane per stream, named after the schedule's streams.
  trace_.meta.source = source;
  traces::RankTrace& r = trace_.add_rank(s_.rank);
  for (size_t i = 0; i < s_.streams.size(); ++i)
    lanes_.push_back(trace_.add_lane(r, s_.streams[i], plan::trace_lane_kind(s_.stream_roles[i]),
                                     static_cast<int32_t>(i)));
}

// ---- buffers -------------------------------------------------------------------

void ScheduleRunner::allocate_persistent() {
  for (size_t b = 0; b < s_.buffers.size(); ++b) {
    const plan::Buffer& buf = s_.buffers[b];
    if (!buf.persistent) continue;
    if (buf.on_host) {
      host_[b] = backend_.host_memory(static_cast<int>(b), static_cast<size_t>(buf.bytes));
      continue;
    }
    alloc(static_cast<int>(b));
    pending_init_[b] = FirstUse::none;
    backend_.zero_persistent(reinterpret_cast<void*>(live_[b]->address),
                             static_cast<size_t>(buf.bytes));
  }
  persistent_allocated_ = allocated_;
}

void ScheduleRunner::alloc(int buffer) {
  const plan::Buffer& b = s_.buffers[static_cast<size_t>(buffer)];
  if (b.on_host)
    throw ExecError("buffer '" + plan::buffer_name(g_, b) +
                    "' is a transient host buffer; the engines only have persistent ones");
  if (live_[static_cast<size_t>(buffer)])
    throw ExecError("buffer '" + plan::buffer_name(g_, b) + "' allocated twice");
  backend_.poll_completions();
  const int64_t now = profiler::host_now_ns();
  allocator_.set_time(now);
  alloc::Allocation a;
  try {
    a = allocator_.allocate(static_cast<uint64_t>(b.bytes), static_cast<alloc::StreamId>(b.stream),
                            static_cast<uint32_t>(b.category));
  } catch (const alloc::OutOfMemory& e) {
    throw ExecError("rank " + std::to_string(s_.rank) + ": out of memory allocating '" +
                    plan::buffer_name(g_, b) + "': " + e.what());
  }
  backend_.allocated(buffer, a);
  live_[static_cast<size_t>(buffer)] = a;
  allocated_ += static_cast<int64_t>(a.bytes);
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  const bool zero = plan::accumulates(b.role) || zero_at_alloc_[static_cast<size_t>(buffer)] != 0;
  pending_init_[static_cast<size_t>(buffer)] =
      zero ? FirstUse::zero : (b.role == plan::BufferRole::input ? FirstUse::data : FirstUse::none);
  traces::add_allocation(trace_.ranks[0], now, static_cast<int64_t>(a.bytes), a.address,
                         lanes_[static_cast<size_t>(b.stream)],
                         plan::trace_memory_category(b.category),
                         static_cast<int64_t>(allocator_.counters().reserved.current));
}

void ScheduleRunner::free(int buffer, const plan::SmallVector<int, 4>& pending) {
  const plan::Buffer& b = s_.buffers[static_cast<size_t>(buffer)];
  if (b.on_host) return;
  auto& slot = live_[static_cast<size_t>(buffer)];
  if (!slot) throw ExecError("buffer '" + plan::buffer_name(g_, b) + "' freed but not allocated");
  backend_.poll_completions();
  const std::vector<alloc::EventId> events = backend_.free_events(buffer, pending);
  const int64_t now = profiler::host_now_ns();
  allocator_.set_time(now);
  allocator_.free(slot->handle, events);
  allocated_ -= static_cast<int64_t>(slot->bytes);
  traces::add_allocation(trace_.ranks[0], now, -static_cast<int64_t>(slot->bytes), slot->address,
                         lanes_[static_cast<size_t>(b.stream)],
                         plan::trace_memory_category(b.category),
                         static_cast<int64_t>(allocator_.counters().reserved.current));
  slot.reset();
}

void* ScheduleRunner::address(int buffer) const {
  const plan::Buffer& b = s_.buffers[static_cast<size_t>(buffer)];
  if (b.on_host) {
    if (!host_[static_cast<size_t>(buffer)])
      throw ExecError("host buffer '" + plan::buffer_name(g_, b) + "' does not exist");
    return host_[static_cast<size_t>(buffer)];
  }
  if (!live_[static_cast<size_t>(buffer)])
    throw ExecError("buffer '" + plan::buffer_name(g_, b) + "' is not allocated");
  return reinterpret_cast<void*>(live_[static_cast<size_t>(buffer)]->address);
}

int ScheduleRunner::persistent_buffer(plan::BufferRole role, int unit) const {
  for (size_t b = 0; b < s_.buffers.size(); ++b) {
    const plan::Buffer& buf = s_.buffers[b];
    if (buf.persistent && buf.unit == unit && buf.role == role) return static_cast<int>(b);
  }
  return -1;
}

// ---- actions ---------------------------------------------------------------------

void ScheduleRunner::launch(int op_index) {
  const plan::ScheduleOp& op = s_.ops[static_cast<size_t>(op_index)];
  LaunchBuffers lb;
  lb.ptrs.reserve(op.buffers.size());
  lb.init.reserve(op.buffers.size());
  for (int b : op.buffers) {
    const plan::Buffer& buf = s_.buffers[static_cast<size_t>(b)];
    if (buf.on_host) {
      lb.ptrs.push_back(host_[static_cast<size_t>(b)]);
      lb.init.push_back(FirstUse::none);
      continue;
    }
    if (!live_[static_cast<size_t>(b)])
      throw ExecError("op " + std::to_string(op_index) + " uses buffer '" +
                      plan::buffer_name(g_, buf) + "' that is not allocated");
    lb.ptrs.push_back(reinterpret_cast<void*>(live_[static_cast<size_t>(b)]->address));
    lb.init.push_back(pending_init_[static_cast<size_t>(b)]);
    pending_init_[static_cast<size_t>(b)] = FirstUse::none;
  }
  backend_.launch(op_index, std::move(lb));
}

void ScheduleRunner::host_wait(int op) {
  const int64_t t0 = profiler::host_now_ns();
  backend_.host_wait(op);
  traces::add_event(trace_.ranks[0], lanes_[0], trace_.intern("host wait"), traces::Category::sync,
                    t0, profiler::host_now_ns() - t0);
}

std::string ScheduleRunner::op_label(int index) const {
  return exec::op_label(g_, up_, s_, index);
}

std::string ScheduleRunner::action_label(const plan::Action& a) const {
  switch (a.kind) {
    case ActionKind::launch:
      return op_label(a.op);
    case ActionKind::host_wait:
      return "host wait for " + op_label(a.op);
    case ActionKind::alloc:
    case ActionKind::free:
      return std::string(a.kind == ActionKind::alloc ? "alloc" : "free") + " of '" +
             plan::buffer_name(g_, s_.buffers[static_cast<size_t>(a.buffer)]) + "'";
  }
  return "?";
}

void ScheduleRunner::run_actions() {
  for (const plan::Action& a : s_.actions) {
    try {
      backend_.before_action();
      switch (a.kind) {
        case ActionKind::launch:
          launch(a.op);
          break;
        case ActionKind::alloc:
          alloc(a.buffer);
          break;
        case ActionKind::free:
          free(a.buffer, a.pending_ops);
          break;
        case ActionKind::host_wait:
          host_wait(a.op);
          break;
      }
    } catch (const std::exception& e) {
      if (!label_errors_) throw;
      throw ExecError("rank " + std::to_string(s_.rank) + ", " + action_label(a) + ": " + e.what());
    }
  }
}

void ScheduleRunner::record_step(
    int64_t step, int64_t start_ns, int64_t end_ns,
    const std::function<bool(int op, int64_t* start, int64_t* end)>& time_of) {
  traces::RankTrace& r = trace_.ranks[0];
  for (size_t i = 0; i < s_.ops.size(); ++i) {
    int64_t start = 0, end = 0;
    if (!time_of(static_cast<int>(i), &start, &end)) continue;
    const plan::ScheduleOp& op = s_.ops[i];
    traces::Event& e = traces::add_event(
        r, lanes_[static_cast<size_t>(op.stream)], trace_.intern(op_event_name(g_, up_, op)),
        plan::trace_category(op.kind), start, std::max<int64_t>(end - start, 0));
    if (op.unit >= 0) e.unit = trace_.intern(up_.units[static_cast<size_t>(op.unit)].name);
    e.op = trace_.intern(op_event_type(g_, op));
    // The plan's FLOPs and bytes, as the simulator costs them: engine traces
    // calibrate compute like profiler traces do.
    e.flops = static_cast<uint64_t>(std::max(plan::schedule_op_flops(sizes_, op), 0.0));
    e.bytes = static_cast<uint64_t>(std::max(plan::schedule_op_bytes(sizes_, op), 0.0));
  }
  r.steps.push_back(traces::Step{step, start_ns, end_ns});
}

}  // namespace shardscope::engine::exec
