// Host side and threads of RankExecutor: actions in host order, stream
// threads, completion tracking, allocator driving and recording. What each op
// computes is in exec_graph_ops.cpp and exec_fsdp_ops.cpp.
#include "engine/exec/rank_executor.h"

#include <cstring>

#include "engine/cpu/ops.h"
#include "engine/exec/f32_view.h"
#include "engine/exec/schedule_info.h"
#include "plan/error.h"
#include "profiler/host_clock.h"

namespace shardscope::engine::exec {

using plan::ActionKind;
using plan::OpKind;

RankExecutor::RankExecutor(const plan::Graph& graph, const plan::Policy& policy,
                           const plan::UnitPlan& units, const plan::Schedule& schedule,
                           comm::Communicator& comm, const DataSource& data)
    : g_(graph),
      p_(policy),
      up_(units),
      s_(schedule),
      comm_(comm),
      data_(data),
      allocator_(backing_) {
  if (s_.rank != comm_.rank())
    throw ExecError("schedule of rank " + std::to_string(s_.rank) + " given to rank " +
                    std::to_string(comm_.rank()));
  if (comm_.groups().size() != s_.groups.size())
    throw ExecError("communicator groups do not match the schedule's");
  w_ = s_.workload;
  const int64_t n = s_.world.shard_group_size;
  for (const plan::Unit& u : up_.units) layouts_.emplace_back(g_, u, p_.flavor, n);
  const GroupIndices gi = group_indices(s_);
  shard_index_ = gi.shard_index;
  reshard_index_ = gi.reshard_index;
  scaler_ = LossScaler::from_policy(p_);

  const size_t nb = s_.buffers.size(), no = s_.ops.size();
  live_.resize(nb);
  host_bufs_.resize(nb);
  pending_init_.assign(nb, Init::none);
  done_.assign(no, 0);
  reported_.assign(no, 0);
  op_start_.assign(no, 0);
  op_end_.assign(no, 0);
  group_next_seq_.assign(s_.groups.size(), 0);

  // Recording: one lane per stream.
  trace_.meta.source = traces::Source::engine_cpu;
  traces::RankTrace& r = trace_.add_rank(s_.rank);
  for (size_t i = 0; i < s_.streams.size(); ++i)
    lanes_.push_back(trace_.add_lane(r, s_.streams[i], plan::trace_lane_kind(s_.stream_roles[i]),
                                     static_cast<int32_t>(i)));

  // Persistent buffers exist before the first step (zeroed).
  for (size_t b = 0; b < nb; ++b) {
    const plan::Buffer& buf = s_.buffers[b];
    if (!buf.persistent) continue;
    if (buf.on_host) {
      host_bufs_[b].assign(static_cast<size_t>(buf.bytes / 4), 0.0f);
      continue;
    }
    host_alloc(static_cast<int>(b), profiler::host_now_ns());
    std::memset(reinterpret_cast<void*>(live_[b]->address), 0, static_cast<size_t>(buf.bytes));
  }
  persistent_allocated_ = allocated_;

  for (size_t i = 0; i < s_.streams.size(); ++i) streams_.emplace_back();
  for (size_t i = 1; i < s_.streams.size(); ++i)
    streams_[i].thread = std::thread([this, i] { stream_main(static_cast<int>(i)); });
}

RankExecutor::~RankExecutor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (Stream& st : streams_)
    if (st.thread.joinable()) st.thread.join();
}

// ---- buffers -------------------------------------------------------------------

plan::DType RankExecutor::buffer_dtype(int buffer) const {
  return exec::buffer_dtype(g_, p_, s_.buffers[static_cast<size_t>(buffer)]);
}

int RankExecutor::elem_bytes(int buffer) const {
  return plan::dtype_bytes(buffer_dtype(buffer));
}

float* RankExecutor::param_shard(int unit) {
  for (size_t b = 0; b < s_.buffers.size(); ++b) {
    const plan::Buffer& buf = s_.buffers[b];
    if (buf.persistent && buf.unit == unit && buf.category == plan::BufferCategory::parameters)
      return buf.on_host ? host_bufs_[b].data() : reinterpret_cast<float*>(live_[b]->address);
  }
  return nullptr;
}

float* RankExecutor::optimizer_state(int unit, int which) {
  for (size_t b = 0; b < s_.buffers.size(); ++b) {
    const plan::Buffer& buf = s_.buffers[b];
    if (buf.persistent && buf.unit == unit &&
        buf.category == plan::BufferCategory::optimizer_state) {
      float* base =
          buf.on_host ? host_bufs_[b].data() : reinterpret_cast<float*>(live_[b]->address);
      return base + which * up_.units[static_cast<size_t>(unit)].shard_numel;
    }
  }
  return nullptr;
}

void RankExecutor::host_alloc(int buffer, int64_t now) {
  const plan::Buffer& b = s_.buffers[static_cast<size_t>(buffer)];
  if (b.on_host) {
    host_bufs_[static_cast<size_t>(buffer)].assign(static_cast<size_t>(b.bytes / 4), 0.0f);
    return;
  }
  if (live_[static_cast<size_t>(buffer)])
    throw ExecError("buffer '" + plan::buffer_name(g_, b) + "' allocated twice");
  drain_completed();
  allocator_.set_time(now);
  alloc::Allocation a;
  try {
    a = allocator_.allocate(static_cast<uint64_t>(b.bytes), static_cast<alloc::StreamId>(b.stream),
                            static_cast<uint32_t>(b.category));
  } catch (const alloc::OutOfMemory& e) {
    throw ExecError("rank " + std::to_string(s_.rank) + ": out of memory allocating '" +
                    plan::buffer_name(g_, b) + "': " + e.what());
  }
  live_[static_cast<size_t>(buffer)] = a;
  allocated_ += static_cast<int64_t>(a.bytes);
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  pending_init_[static_cast<size_t>(buffer)] =
      accumulates(b) ? Init::zero : (is_data_input(b) ? Init::data : Init::none);
  traces::add_allocation(trace_.ranks[0], now, static_cast<int64_t>(a.bytes), a.address,
                         lanes_[static_cast<size_t>(b.stream)],
                         plan::trace_memory_category(b.category),
                         static_cast<int64_t>(allocator_.counters().reserved.current));
}

void RankExecutor::host_free(int buffer, const plan::SmallVector<int, 4>& pending, int64_t now) {
  const plan::Buffer& b = s_.buffers[static_cast<size_t>(buffer)];
  if (b.on_host) return;
  auto& slot = live_[static_cast<size_t>(buffer)];
  if (!slot) throw ExecError("buffer '" + plan::buffer_name(g_, b) + "' freed but not allocated");
  drain_completed();
  std::vector<alloc::EventId> events;
  for (int op : pending)
    if (!reported_[static_cast<size_t>(op)]) events.push_back(static_cast<alloc::EventId>(op) + 1);
  allocator_.set_time(now);
  allocator_.free(slot->handle, events);
  allocated_ -= static_cast<int64_t>(slot->bytes);
  traces::add_allocation(trace_.ranks[0], now, -static_cast<int64_t>(slot->bytes), slot->address,
                         lanes_[static_cast<size_t>(b.stream)],
                         plan::trace_memory_category(b.category),
                         static_cast<int64_t>(allocator_.counters().reserved.current));
  slot.reset();
}

void RankExecutor::drain_completed() {
  std::vector<int> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done.swap(completed_);
  }
  for (int op : done) {
    reported_[static_cast<size_t>(op)] = 1;
    allocator_.event_completed(static_cast<alloc::EventId>(op) + 1);
  }
}

// ---- threads ----------------------------------------------------------------------

void RankExecutor::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) error_ = message;
  }
  cv_.notify_all();
  comm_.abort(message);
}

void RankExecutor::check_failed() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.empty()) throw ExecError(error_);
}

void RankExecutor::wait_ops(const plan::SmallVector<int, 4>& ops) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    if (!error_.empty() || stop_) return true;
    for (int op : ops)
      if (!done_[static_cast<size_t>(op)]) return false;
    return true;
  });
  if (!error_.empty()) throw ExecError(error_);
  if (stop_) throw ExecError("executor stopped");
}

void RankExecutor::mark_done(int op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_[static_cast<size_t>(op)] = 1;
    completed_.push_back(op);
  }
  cv_.notify_all();
}

void RankExecutor::stream_main(int stream) {
  cpu::set_blas_threads(1);
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !streams_[static_cast<size_t>(stream)].queue.empty(); });
      if (stop_) return;
      task = std::move(streams_[static_cast<size_t>(stream)].queue.front());
      streams_[static_cast<size_t>(stream)].queue.pop_front();
    }
    try {
      execute(task);
    } catch (const std::exception& e) {
      fail("rank " + std::to_string(s_.rank) + ", " + s_.streams[static_cast<size_t>(stream)] +
           " stream, op " + std::to_string(task.op) + " (" +
           plan::op_kind_name(s_.ops[static_cast<size_t>(task.op)].kind) + "): " + e.what());
    }
  }
}

void RankExecutor::execute(const Task& task) {
  const plan::ScheduleOp& op = s_.ops[static_cast<size_t>(task.op)];
  wait_ops(op.waits);
  if (plan::is_collective(op.kind)) {  // one collective per group at a time, in seq order
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] {
      return !error_.empty() || stop_ || group_next_seq_[static_cast<size_t>(op.group)] == op.seq;
    });
    if (!error_.empty()) throw ExecError(error_);
    if (stop_) throw ExecError("executor stopped");
  }
  // First users initialise buffers (in stream order, as a memset on the stream would).
  for (size_t i = 0; i < op.buffers.size(); ++i) {
    if (task.init[i] == Init::zero)
      std::memset(task.ptrs[i], 0,
                  static_cast<size_t>(s_.buffers[static_cast<size_t>(op.buffers[i])].bytes));
    if (task.init[i] == Init::data) {
      const plan::Buffer& b = s_.buffers[static_cast<size_t>(op.buffers[i])];
      const int64_t W = s_.world.world_size, B = w_.batch;
      const int64_t first = (op.micro_step * W + s_.rank) * B;
      const plan::DType dt = buffer_dtype(op.buffers[i]);
      if (plan::is_floating(dt) && dt != plan::DType::f32) {
        // A float input (MLP features) stored 16-bit: the data is made in
        // fp32 and rounded into the buffer (fill() writes 4-byte floats).
        std::vector<float> staging(static_cast<size_t>(b.bytes / plan::dtype_bytes(dt)));
        data_.fill(b.tensor, first, B, w_.seq, staging.data());
        store_f32(staging.data(), task.ptrs[i], dt, static_cast<int64_t>(staging.size()));
      } else {
        data_.fill(b.tensor, first, B, w_.seq, task.ptrs[i]);
      }
    }
  }
  op_start_[static_cast<size_t>(task.op)] = profiler::host_now_ns();
  if (op.kind == OpKind::forward || op.kind == OpKind::backward || op.kind == OpKind::recompute)
    run_graph_op(task, op);
  else
    run_fsdp_op(task, op);
  op_end_[static_cast<size_t>(task.op)] = profiler::host_now_ns();
  if (plan::is_collective(op.kind)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++group_next_seq_[static_cast<size_t>(op.group)];
    }
  }
  mark_done(task.op);
}

// ---- the step ----------------------------------------------------------------------

void RankExecutor::host_launch(int op_index) {
  const plan::ScheduleOp& op = s_.ops[static_cast<size_t>(op_index)];
  Task task;
  task.op = op_index;
  for (int b : op.buffers) {
    const plan::Buffer& buf = s_.buffers[static_cast<size_t>(b)];
    if (buf.on_host) {
      task.ptrs.push_back(host_bufs_[static_cast<size_t>(b)].data());
      task.init.push_back(Init::none);
      continue;
    }
    if (!live_[static_cast<size_t>(b)])
      throw ExecError("op " + std::to_string(op_index) + " uses buffer '" +
                      plan::buffer_name(g_, buf) + "' that is not allocated");
    task.ptrs.push_back(reinterpret_cast<void*>(live_[static_cast<size_t>(b)]->address));
    task.init.push_back(pending_init_[static_cast<size_t>(b)]);
    pending_init_[static_cast<size_t>(b)] = Init::none;
  }
  if (op.kind == OpKind::all_reduce && op.buffers.empty()) {
    // The scalar all-reduce of the op it waits on (inf check or norm).
    for (int w : op.waits) {
      const OpKind k = s_.ops[static_cast<size_t>(w)].kind;
      if (k == OpKind::inf_check) task.scalar = 1;
      if (k == OpKind::grad_norm) task.scalar = 2;
    }
    if (task.scalar == 0)
      throw ExecError("scalar all-reduce " + std::to_string(op_index) +
                      " follows neither an inf check nor a norm");
  }
  if (op.kind == OpKind::grad_scale) {
    task.scale_kind = (scaler_.enabled && !unscaled_) ? 1 : 2;
    if (task.scale_kind == 1) unscaled_ = true;
  }
  const int stream = op.stream;
  if (s_.stream_roles[static_cast<size_t>(stream)] == plan::StreamRole::host) {
    execute(task);  // the host's own work (offloaded optimizer)
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams_[static_cast<size_t>(stream)].queue.push_back(std::move(task));
  }
  cv_.notify_all();
}

StepOutcome RankExecutor::run_step(int64_t step) {
  check_failed();
  StepOutcome out;
  step_ = step;
  micro_loss_sum_ = 0;
  found_inf_ = 0;
  norm_sq_ = 0;
  grad_norm_ = -1;
  unscaled_ = false;
  const double scale = scaler_.enabled ? scaler_.scale : 1.0;
  dloss_ = static_cast<float>(scale / static_cast<double>(s_.grad_accum_steps));
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::fill(done_.begin(), done_.end(), 0);
    std::fill(group_next_seq_.begin(), group_next_seq_.end(), 0);
    completed_.clear();
  }
  std::fill(reported_.begin(), reported_.end(), 0);
  // zero_grad(set_to_none=False): the persistent gradient shards.
  for (size_t b = 0; b < s_.buffers.size(); ++b) {
    const plan::Buffer& buf = s_.buffers[b];
    if (!buf.persistent || buf.category != plan::BufferCategory::gradients) continue;
    if (buf.on_host)
      std::fill(host_bufs_[b].begin(), host_bufs_[b].end(), 0.0f);
    else
      std::memset(reinterpret_cast<void*>(live_[b]->address), 0, static_cast<size_t>(buf.bytes));
  }

  out.start_ns = profiler::host_now_ns();
  const uint32_t host_lane = lanes_[0];
  try {
    for (const plan::Action& a : s_.actions) {
      check_failed();
      switch (a.kind) {
        case ActionKind::launch:
          host_launch(a.op);
          break;
        case ActionKind::alloc:
          host_alloc(a.buffer, profiler::host_now_ns());
          break;
        case ActionKind::free:
          host_free(a.buffer, a.pending_ops, profiler::host_now_ns());
          break;
        case ActionKind::host_wait: {
          const int64_t t0 = profiler::host_now_ns();
          wait_ops({a.op});
          traces::add_event(trace_.ranks[0], host_lane, trace_.intern("host wait"),
                            traces::Category::sync, t0, profiler::host_now_ns() - t0);
          break;
        }
      }
    }
    // End of step: wait for every op (torch.cuda.synchronize()).
    plan::SmallVector<int, 4> all;
    for (size_t i = 0; i < s_.ops.size(); ++i) all.push_back(static_cast<int>(i));
    wait_ops(all);
  } catch (const std::exception& e) {
    fail(e.what());
    check_failed();
    throw;
  }
  drain_completed();
  out.end_ns = profiler::host_now_ns();

  // Recording: one event per op on its stream's lane.
  traces::RankTrace& r = trace_.ranks[0];
  for (size_t i = 0; i < s_.ops.size(); ++i) {
    const plan::ScheduleOp& op = s_.ops[i];
    traces::Event& e = traces::add_event(
        r, lanes_[static_cast<size_t>(op.stream)], trace_.intern(op_event_name(g_, up_, op)),
        plan::trace_category(op.kind), op_start_[i], op_end_[i] - op_start_[i]);
    if (op.unit >= 0) e.unit = trace_.intern(up_.units[static_cast<size_t>(op.unit)].name);
    e.op = trace_.intern(op_event_type(g_, op));
    e.bytes = static_cast<uint64_t>(std::max<int64_t>(op.bytes, 0));
  }
  r.steps.push_back(traces::Step{step, out.start_ns, out.end_ns});

  // Loss scaling bookkeeping (GradScaler.update()).
  out.skipped = scaler_.update(found_inf_ > 0);
  if (!out.skipped) ++optimizer_steps_;
  out.loss = micro_loss_sum_ / static_cast<double>(s_.grad_accum_steps);
  out.grad_norm = grad_norm_;
  return out;
}

}  // namespace shardscope::engine::exec
