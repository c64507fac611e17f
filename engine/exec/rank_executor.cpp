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
      // Expandable segments need a growable range: HostBacking throws
      // UnsupportedConfig for them (never a silent fallback).
      allocator_(backing_,
                 alloc::AllocatorConfig{alloc::Mode::caching, schedule.expandable_segments}),
      runner_(graph, units, schedule, allocator_, *this, traces::Source::engine_cpu,
              /*label_errors=*/false) {
  if (s_.rank != comm_.rank())
    throw ExecError("schedule of rank " + std::to_string(s_.rank) + " given to rank " +
                    std::to_string(comm_.rank()));
  if (comm_.groups().size() != s_.groups.size())
    throw ExecError("communicator groups do not match the schedule's");
  w_ = s_.workload;
  router_ordinal_.assign(g_.ops.size(), -1);
  for (size_t i = 0; i < g_.ops.size(); ++i)
    if (g_.ops[i].type == plan::OpType::moe_router) {
      router_ordinal_[i] = static_cast<int>(expert_tokens_.size());
      expert_tokens_.emplace_back(static_cast<size_t>(g_.ops[i].attrs.num_experts.value_or(0)), 0);
    }
  const int64_t n = s_.world.shard_group_size;
  for (const plan::Unit& u : up_.units) layouts_.emplace_back(g_, u, p_.flavor, n);
  const GroupIndices gi = group_indices(s_);
  shard_index_ = gi.shard_index;
  reshard_index_ = gi.reshard_index;
  scaler_ = LossScaler::from_policy(p_);

  const size_t nb = s_.buffers.size(), no = s_.ops.size();
  host_bufs_.resize(nb);
  done_.assign(no, 0);
  reported_.assign(no, 0);
  op_start_.assign(no, 0);
  op_end_.assign(no, 0);
  group_next_seq_.assign(s_.groups.size(), 0);

  // Persistent buffers exist before the first step (zeroed).
  runner_.allocate_persistent();

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

// ---- buffers (RunnerBackend) ------------------------------------------------------

float* RankExecutor::param_shard(int unit) {
  const int b = runner_.persistent_buffer(plan::BufferRole::param_shard, unit);
  return b < 0 ? nullptr : static_cast<float*>(runner_.address(b));
}

float* RankExecutor::optimizer_state(int unit, int which) {
  const int b = runner_.persistent_buffer(plan::BufferRole::optimizer_state, unit);
  if (b < 0) return nullptr;
  return static_cast<float*>(runner_.address(b)) +
         which * up_.units[static_cast<size_t>(unit)].shard_numel;
}

void* RankExecutor::host_memory(int buffer, size_t bytes) {
  host_bufs_[static_cast<size_t>(buffer)].assign(bytes / 4, 0.0f);
  return host_bufs_[static_cast<size_t>(buffer)].data();
}

void RankExecutor::zero_persistent(void* address, size_t bytes) {
  std::memset(address, 0, bytes);
}

// The allocator's event of op i is i + 1; ops that completed since the last
// poll fire theirs (record_stream's deferred reuse ends).
void RankExecutor::poll_completions() {
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

std::vector<alloc::EventId> RankExecutor::free_events(int /*buffer*/,
                                                      const plan::SmallVector<int, 4>& pending) {
  std::vector<alloc::EventId> events;
  for (int op : pending)
    if (!reported_[static_cast<size_t>(op)]) events.push_back(static_cast<alloc::EventId>(op) + 1);
  return events;
}

// ---- threads ----------------------------------------------------------------------

void RankExecutor::fail(const std::string& message, bool comm_failure) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) {
      error_ = message;
      error_from_comm_ = comm_failure;
    }
  }
  cv_.notify_all();
  comm_.abort(message);
}

void RankExecutor::check_failed() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.empty()) return;
  if (error_from_comm_) throw comm::CommError(error_);
  throw ExecError(error_);
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
               plan::op_kind_name(s_.ops[static_cast<size_t>(task.op)].kind) + "): " + e.what(),
           dynamic_cast<const comm::CommError*>(&e) != nullptr);
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
    const plan::Buffer& b = s_.buffers[static_cast<size_t>(op.buffers[i])];
    if (task.init[i] == FirstUse::zero) std::memset(task.ptrs[i], 0, static_cast<size_t>(b.bytes));
    if (task.init[i] == FirstUse::data) fill_input(data_, s_, b, op.micro_step, task.ptrs[i]);
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

void RankExecutor::launch(int op_index, LaunchBuffers&& buffers) {
  const plan::ScheduleOp& op = s_.ops[static_cast<size_t>(op_index)];
  Task task;
  task.op = op_index;
  task.ptrs = std::move(buffers.ptrs);
  task.init = std::move(buffers.init);
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
  local_norm_sq_ = 0;
  const double scale = scaler_.enabled ? scaler_.scale : 1.0;
  dloss_ = static_cast<float>(scale / static_cast<double>(s_.grad_accum_steps));
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::fill(done_.begin(), done_.end(), 0);
    std::fill(group_next_seq_.begin(), group_next_seq_.end(), 0);
    completed_.clear();
  }
  std::fill(reported_.begin(), reported_.end(), 0);
  for (std::vector<int64_t>& counts : expert_tokens_) std::fill(counts.begin(), counts.end(), 0);
  // zero_grad(set_to_none=False): the persistent gradient shards.
  for (size_t b = 0; b < s_.buffers.size(); ++b) {
    const plan::Buffer& buf = s_.buffers[b];
    if (buf.persistent && buf.role == plan::BufferRole::grad_shard)
      std::memset(runner_.address(static_cast<int>(b)), 0, static_cast<size_t>(buf.bytes));
  }

  out.start_ns = profiler::host_now_ns();
  try {
    runner_.run_actions();
    // End of step: wait for every op (torch.cuda.synchronize()).
    plan::SmallVector<int, 4> all;
    for (size_t i = 0; i < s_.ops.size(); ++i) all.push_back(static_cast<int>(i));
    wait_ops(all);
  } catch (const std::exception& e) {
    fail(e.what(), dynamic_cast<const comm::CommError*>(&e) != nullptr);
    check_failed();
    throw;
  }
  poll_completions();
  out.end_ns = profiler::host_now_ns();

  // Recording: one event per op on its stream's lane, at its host-clock times.
  runner_.record_step(step, out.start_ns, out.end_ns, [this](int op, int64_t* start, int64_t* end) {
    *start = op_start_[static_cast<size_t>(op)];
    *end = op_end_[static_cast<size_t>(op)];
    return true;
  });

  // Loss scaling bookkeeping (GradScaler.update()).
  out.skipped = scaler_.update(found_inf_ > 0);
  if (!out.skipped) ++optimizer_steps_;
  out.loss = micro_loss_sum_ / static_cast<double>(s_.grad_accum_steps);
  out.grad_norm = grad_norm_;
  out.local_grad_norm_sq = local_norm_sq_;
  return out;
}

}  // namespace shardscope::engine::exec
