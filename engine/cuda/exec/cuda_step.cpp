// One training step of CudaRankExecutor: the schedule's actions in host
// order (launch, alloc, free, host_wait), first-user initialisation of
// buffers, the end-of-step synchronisation, error flags and recording.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "alloc/errors.h"
#include "engine/cuda/check.h"
#include "engine/cuda/exec/cuda_rank_executor.h"
#include "engine/cuda/exec/host_poll.h"
#include "engine/exec/f32_view.h"
#include "engine/exec/schedule_info.h"
#include "profiler/host_clock.h"

namespace shardscope::engine::cuda {

using exec::ExecError;
using plan::OpKind;

namespace {
// CUPTI external correlation of an op's launches (kernels, copies, memsets).
class ExternalIdScope {
 public:
  ExternalIdScope(profiler::CuptiRecorder* recorder, uint64_t id) : recorder_(recorder) {
    if (recorder_) recorder_->push_external_id(id);
  }
  // Never throws (a destructor, possibly during unwinding): a refused pop
  // leaves the id stack one deeper, which only mislabels later records.
  ~ExternalIdScope() {
    if (recorder_) recorder_->pop_external_id_noexcept();
  }
  ExternalIdScope(const ExternalIdScope&) = delete;
  ExternalIdScope& operator=(const ExternalIdScope&) = delete;

 private:
  profiler::CuptiRecorder* recorder_;
};
}  // namespace

// ---- waiting on the device --------------------------------------------------------

// Like cudaEventSynchronize (the host yields while it polls, then sleeps
// between polls as the wait grows: host_poll.h), with two exits a blocking wait lacks: a
// collective that failed asynchronously (NCCL's remote, network or system
// errors) never completes, so the communicator is asked for such errors every
// millisecond; and a wait longer than the timeout throws naming `what`.
void CudaRankExecutor::wait_device(cudaEvent_t event, const std::string& what) {
  constexpr int64_t kCheckEveryNs = 1'000'000;
  const int64_t start = profiler::host_now_ns();
  int64_t next_check = start;
  for (;;) {
    const cudaError_t state = cudaEventQuery(event);
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady) check_cuda(state, "cudaEventQuery", __FILE__, __LINE__);
    const int64_t now = profiler::host_now_ns();
    if (now >= next_check) {
      comm_.check_async_errors();
      if (now - start > opts_.device_wait_timeout_ns)
        throw ExecError("waited " + std::to_string((now - start) / 1'000'000'000) + " s for " +
                        what +
                        " on the device (a collective whose peers never arrived?); the limit is "
                        "CudaExecOptions::device_wait_timeout_ns");
      next_check = now + kCheckEveryNs;
    }
    const int64_t pause = poll_pause_ns(now - start);  // host_poll.h: few polls in a long wait
    if (pause > 0)
      std::this_thread::sleep_for(std::chrono::nanoseconds(pause));
    else
      std::this_thread::yield();
  }
}

// ---- memory (RunnerBackend) --------------------------------------------------------

// The segments the allocation made the allocator reserve take its category
// (category_at: CUPTI's memory records are mapped through them).
void CudaRankExecutor::allocated(int buffer, const alloc::Allocation& /*a*/) {
  const traces::MemoryCategory category =
      plan::trace_memory_category(s_.buffers[static_cast<size_t>(buffer)].category);
  const auto& history = backing_->segment_history();
  for (; segments_seen_ < history.size(); ++segments_seen_)
    segments_[history[segments_seen_].base] = {
        history[segments_seen_].base + history[segments_seen_].bytes, category};
}

// record_stream: an event on every other stream that used the buffer,
// recorded now (after all its work issued so far, the users included).
std::vector<alloc::EventId> CudaRankExecutor::free_events(
    int buffer, const plan::SmallVector<int, 4>& pending) {
  const plan::Buffer& b = s_.buffers[static_cast<size_t>(buffer)];
  std::vector<alloc::EventId> events;
  std::vector<int> streams_seen;
  for (int op : pending) {
    if (on_host_stream(op)) continue;  // host ops ran to completion at their launch
    const int st = s_.ops[static_cast<size_t>(op)].stream;
    if (st == b.stream ||
        std::find(streams_seen.begin(), streams_seen.end(), st) != streams_seen.end())
      continue;
    streams_seen.push_back(st);
    events.push_back(events_->record(streams_[static_cast<size_t>(st)]));
  }
  return events;
}

void* CudaRankExecutor::host_memory(int /*buffer*/, size_t bytes) {
  return pinned_alloc(bytes);  // zeroed
}

void CudaRankExecutor::zero_persistent(void* address, size_t bytes) {
  SS_CUDA_CHECK(cudaMemset(address, 0, bytes));
}

// ---- ops --------------------------------------------------------------------------

// First users initialise buffers on their own stream, before the op: zero for
// accumulated gradients, the micro-batch's data for graph inputs.
void CudaRankExecutor::first_use(int index, const std::vector<void*>& ptrs,
                                 const std::vector<exec::FirstUse>& init, cudaStream_t stream) {
  const plan::ScheduleOp& op = s_.ops[static_cast<size_t>(index)];
  for (size_t i = 0; i < op.buffers.size(); ++i) {
    const plan::Buffer& b = s_.buffers[static_cast<size_t>(op.buffers[i])];
    if (init[i] == exec::FirstUse::zero)
      SS_CUDA_CHECK(cudaMemsetAsync(ptrs[i], 0, static_cast<size_t>(b.bytes), stream));
    if (init[i] != exec::FirstUse::data) continue;
    void* staging = input_staging_[static_cast<size_t>(op.buffers[i])];
    if (!staging) throw ExecError("input buffer '" + plan::buffer_name(g_, b) + "' has no staging");
    exec::fill_input(data_, s_, b, op.micro_step, staging);
    SS_CUDA_CHECK(cudaMemcpyAsync(ptrs[i], staging, static_cast<size_t>(b.bytes),
                                  cudaMemcpyHostToDevice, stream));
  }
}

void CudaRankExecutor::launch(int index, exec::LaunchBuffers&& buffers) {
  const plan::ScheduleOp& op = s_.ops[static_cast<size_t>(index)];
  const std::vector<void*>& ptrs = buffers.ptrs;
  if (op.purpose == plan::OpPurpose::clip) clipped_ = true;
  if (on_host_stream(index)) {  // the host's own work (offloaded optimizer)
    for (int w : op.waits) {
      if (on_host_stream(w)) continue;
      wait_device(done_evt_[static_cast<size_t>(w)], op_label(w));
      ++host_syncs_;
      finish_d2h(w);
    }
    host_op_start_[static_cast<size_t>(index)] = profiler::host_now_ns();
    run_host_op(op, ptrs);
    host_op_end_[static_cast<size_t>(index)] = profiler::host_now_ns();
    return;
  }
  cudaStream_t stream = streams_[static_cast<size_t>(op.stream)];
  for (int w : op.waits) {
    if (on_host_stream(w) || s_.ops[static_cast<size_t>(w)].stream == op.stream) continue;
    SS_CUDA_CHECK(cudaStreamWaitEvent(stream, done_evt_[static_cast<size_t>(w)], 0));
  }
  const ExternalIdScope external(opts_.recorder, static_cast<uint64_t>(index) + 1);
  first_use(index, ptrs, buffers.init, stream);
  if (start_evt_[static_cast<size_t>(index)])
    SS_CUDA_CHECK(cudaEventRecord(start_evt_[static_cast<size_t>(index)], stream));
  if (op.kind == OpKind::forward || op.kind == OpKind::backward || op.kind == OpKind::recompute)
    graph_op(index, op, &ptrs, stream);
  else
    run_fsdp_op(index, op, ptrs, stream);
  SS_CUDA_CHECK(cudaEventRecord(done_evt_[static_cast<size_t>(index)], stream));
}

// host_wait: the host blocks until the op completed (the only host
// synchronisation inside a step), then takes what the host needs from it.
void CudaRankExecutor::host_wait(int index) {
  if (!on_host_stream(index)) {
    wait_device(done_evt_[static_cast<size_t>(index)], op_label(index));
    ++host_syncs_;
  }
  finish_d2h(index);
  if (scalar_from_host_[static_cast<size_t>(index)]) {
    const plan::OpPurpose purpose = s_.ops[static_cast<size_t>(index)].purpose;
    if (purpose == plan::OpPurpose::inf_flag) host_found_inf_ = exchange_->found_inf;
    if (purpose == plan::OpPurpose::norm_sq) host_norm_sq_ = exchange_->norm_sq;
  }
}

// ---- the step ----------------------------------------------------------------------

exec::StepOutcome CudaRankExecutor::run_step(int64_t step) {
  exec::StepOutcome out;
  clipped_ = false;
  inf_on_host_ = norm_on_host_ = false;
  host_found_inf_ = host_norm_sq_ = 0;
  grad_norm_ = -1;
  host_syncs_ = 0;
  std::fill(d2h_pending_.begin(), d2h_pending_.end(), 0);
  const double scale = scaler_.enabled ? scaler_.scale : 1.0;
  dloss_ = static_cast<float>(scale / static_cast<double>(s_.grad_accum_steps));
  const std::string where = "rank " + std::to_string(s_.rank) + ", ";
  cudaStream_t compute = streams_[static_cast<size_t>(compute_)];

  try {
    // Step scalars, error flags and zero_grad(set_to_none=False) of the
    // persistent gradient shards, before the reference event.
    SS_CUDA_CHECK(cudaMemsetAsync(scalars_, 0, sizeof(StepScalars), compute));
    SS_CUDA_CHECK(
        cudaMemsetAsync(flags_, 0, std::max<size_t>(s_.ops.size(), 1) * sizeof(int32_t), compute));
    zero_expert_tokens(compute);
    for (size_t b = 0; b < s_.buffers.size(); ++b) {
      const plan::Buffer& buf = s_.buffers[b];
      if (!buf.persistent || buf.role != plan::BufferRole::grad_shard) continue;
      void* address = runner_->address(static_cast<int>(b));
      if (buf.on_host)
        std::memset(address, 0, static_cast<size_t>(buf.bytes));
      else
        SS_CUDA_CHECK(cudaMemsetAsync(address, 0, static_cast<size_t>(buf.bytes), compute));
    }
    // Host-synchronised start: every device time is placed on the host clock
    // as ref_host_ns_ + cudaEventElapsedTime(reference, event). The reference
    // completes after the memsets above (gigabytes for a large model), so its
    // host time is read when the synchronisation returns (late by the wake-up
    // latency, microseconds), not when it is recorded. The step itself starts
    // before the memsets: zero_grad is part of it.
    out.start_ns = profiler::host_now_ns();
    SS_CUDA_CHECK(cudaEventRecord(ref_evt_, compute));
    SS_CUDA_CHECK(cudaEventSynchronize(ref_evt_));
    ref_host_ns_ = profiler::host_now_ns();
    ++host_syncs_;
  } catch (const std::exception& e) {
    throw ExecError(where + "start of step " + std::to_string(step) + ": " + e.what());
  }

  // The actions; an error names the rank and the action.
  runner_->run_actions();

  // End of step (torch.cuda.synchronize()): every stream joins compute, the
  // step's scalars and error flags come back, one synchronisation.
  try {
    for (size_t i = 1; i < streams_.size(); ++i) {
      if (static_cast<int>(i) == compute_) continue;
      SS_CUDA_CHECK(cudaEventRecord(join_evt_[i], streams_[i]));
      SS_CUDA_CHECK(cudaStreamWaitEvent(compute, join_evt_[i], 0));
    }
    SS_CUDA_CHECK(cudaMemcpyAsync(scalars_host_, scalars_, sizeof(StepScalars),
                                  cudaMemcpyDeviceToHost, compute));
    SS_CUDA_CHECK(cudaMemcpyAsync(flags_host_, flags_,
                                  std::max<size_t>(s_.ops.size(), 1) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, compute));
    SS_CUDA_CHECK(cudaEventRecord(join_evt_[static_cast<size_t>(compute_)], compute));
    wait_device(join_evt_[static_cast<size_t>(compute_)],
                "the end of step " + std::to_string(step));
    ++host_syncs_;
  } catch (const std::exception& e) {
    throw ExecError(where + "end of step " + std::to_string(step) +
                    " (an op of this step failed on the device): " + e.what());
  }
  out.end_ns = profiler::host_now_ns();
  for (size_t i = 0; i < s_.ops.size(); ++i) finish_d2h(static_cast<int>(i));
  check_error_flags();
  // One event per op on its stream's lane: device ops from their timing
  // events (with CUPTI, the device's records replace them: skipped here),
  // host ops from the host clock.
  auto device_time = [&](cudaEvent_t e) {
    float ms = 0;
    SS_CUDA_CHECK(cudaEventElapsedTime(&ms, ref_evt_, e));
    return ref_host_ns_ + std::llround(static_cast<double>(ms) * 1e6);
  };
  runner_->record_step(step, out.start_ns, out.end_ns, [&](int i, int64_t* start, int64_t* end) {
    if (on_host_stream(i)) {
      *start = host_op_start_[static_cast<size_t>(i)];
      *end = host_op_end_[static_cast<size_t>(i)];
      return true;
    }
    if (opts_.recorder) return false;
    *start = device_time(start_evt_[static_cast<size_t>(i)]);
    *end = device_time(done_evt_[static_cast<size_t>(i)]);
    return true;
  });

  // Loss scaling bookkeeping (GradScaler.update()).
  const double found_inf = inf_on_host_ ? host_found_inf_ : scalars_host_->found_inf;
  out.skipped = scaler_.update(found_inf > 0);
  if (!out.skipped) ++optimizer_steps_;
  if (clipped_ && !norm_on_host_) grad_norm_ = std::sqrt(scalars_host_->norm_sq);
  out.loss = scalars_host_->loss_sum / static_cast<double>(s_.grad_accum_steps);
  out.grad_norm = grad_norm_;
  return out;
}

// Embedding ids and cross-entropy labels outside their range: the kernels set
// the op's flag to 1 + the row; reported here, naming the op, the row and the
// id when it came from this rank's input data. A moe_dispatch's flag is 1 +
// the rows its expert got when that count breaks the plan.
void CudaRankExecutor::check_error_flags() const {
  for (size_t i = 0; i < s_.ops.size(); ++i) {
    const int32_t flag = flags_host_[i];
    if (flag == 0) continue;
    const int64_t row = flag - 1;
    const plan::ScheduleOp& op = s_.ops[i];
    std::string message = "rank " + std::to_string(s_.rank) + ", " + op_label(static_cast<int>(i));
    if (op.graph_op < 0) throw ExecError(message + ": error flag " + std::to_string(flag));
    const plan::Op& gop = g_.ops[static_cast<size_t>(op.graph_op)];
    if (gop.type == plan::OpType::moe_dispatch)
      throw ExecError(message + ": " + moe_flag_message(op, flag));
    const bool labels = gop.type == plan::OpType::cross_entropy;
    const int tensor = labels ? gop.inputs.at(1) : gop.inputs.at(0);
    // A label must name a class of the vocabulary: the first valid_classes
    // columns of a padded one (plan/vocab_padding.h).
    const int64_t limit =
        (labels ? (gop.attrs.valid_classes ? gop.attrs.valid_classes : gop.attrs.classes)
                : gop.attrs.num_embeddings)
            .value_or(int64_t{0});
    std::string value;
    for (int b : op.buffers) {
      const void* staging = input_staging_[static_cast<size_t>(b)];
      if (s_.buffers[static_cast<size_t>(b)].tensor == tensor && staging)
        value = " " + std::to_string(static_cast<const int64_t*>(staging)[row]);
    }
    throw ExecError(message + ": " + (labels ? "label" : "token id") + value + " in row " +
                    std::to_string(row) + " of '" + g_.tensors[static_cast<size_t>(tensor)].name +
                    "' is outside [0, " + std::to_string(limit) + ")");
  }
}

}  // namespace shardscope::engine::cuda
