#include "sim/executor.h"

#include <algorithm>

#include "plan/trace_vocabulary.h"

namespace shardscope::sim::detail {

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
      if (op.graph_op >= 0 && plan::is_gemm(graph_.ops[static_cast<size_t>(op.graph_op)]))
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

}  // namespace shardscope::sim::detail
