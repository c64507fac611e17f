// Executes one rank's plan::Schedule on one GPU, as engine/exec's
// RankExecutor does on the CPU (docs/schedule.md's execution rules 1-5). The
// host side (actions in order, allocator accounting, first-use rules,
// recording) is the shared exec::ScheduleRunner; this class is its CUDA
// backend:
//
//  - streams: one CUDA stream per schedule stream but the host
//    (cudaStreamNonBlocking; communication roles at the greatest priority);
//    the host's own ops (offloaded optimizer) run on the calling thread;
//  - events: one cudaEvent recorded after every op (its completion: other
//    streams' waits are cudaStreamWaitEvent on it, host_wait is
//    cudaEventSynchronize on it) and, without CUPTI, one before it (timing);
//    created once, re-recorded every step;
//  - memory: every buffer from alloc/'s CachingAllocator over CudaBacking
//    (cudaMalloc segments), alloc/free in host order; a free with ops of
//    other streams pending records a CudaEventSource event on each of those
//    streams (record_stream), so the block is reused once they are done;
//    with emulated peers (which write only this rank's slot of an
//    all-gather) every all-gather output is zeroed by its first user at each
//    allocation (one cudaMemsetAsync on that stream, before the op's start
//    event), so the other members' slots read as zeros rather than a reused
//    block's stale bytes (NaN/inf patterns);
//    the executor's own device memory (per-stream GEMM and op workspaces, the
//    step's scalars, layout tables) is cudaMalloc'd outside the allocator at
//    start-up and reported as other memory;
//  - host synchronisation inside a step: only the schedule's host_wait
//    actions (fsdp1 limit_all_gathers, the scalar all-reduces of gradient
//    clipping and dynamic loss scaling, offload's copies before the host
//    optimizer), then one stream synchronisation at the end of the step
//    (torch.cuda.synchronize()) after which losses, error flags and timing
//    events are read. The step's start is host-synchronised too (the
//    reference event for timing).
//
// Numerics: CUDA ops (engine/cuda/ops/ops.h) in each buffer's dtype
// (exec::buffer_dtype), fp32 math; collectives in the buffer's dtype through
// the DeviceCommunicator. The scalar all-reduce of the squared gradient norm
// is fp32 (as the CPU engine's): the device double is converted to fp32,
// all-reduced, converted back.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "alloc/caching_allocator.h"
#include "engine/cuda/comm/device_communicator.h"
#include "engine/cuda/exec/exec_kernels.h"
#include "engine/cuda/memory/cuda_backing.h"
#include "engine/cuda/ops/attention_cudnn.h"
#include "engine/cuda/ops/ops.h"
#include "engine/exec/data.h"
#include "engine/exec/exec_error.h"
#include "engine/exec/layout.h"
#include "engine/exec/rank_executor.h"
#include "engine/exec/schedule_info.h"
#include "engine/exec/schedule_runner.h"
#include "plan/schedule.h"
#include "profiler/cupti/cupti_recorder.h"
#include "traces/trace.h"

namespace shardscope::engine::cuda {

struct CudaExecOptions {
  int device = 0;
  // Non-null: CUPTI records the step (the trace's device events come from it
  // through append_recording); the executor pushes op index + 1 as external
  // id around each op's launches and records no timing events of its own.
  profiler::CuptiRecorder* recorder = nullptr;
  // A host wait on the device (host_wait, the end of a step) longer than this
  // throws ExecError naming what it waited for: a collective whose peer is
  // alive but never arrives does not complete, and NCCL reports nothing.
  // PyTorch's NCCL watchdog uses the same 10 minutes by default.
  int64_t device_wait_timeout_ns = int64_t{600} * 1'000'000'000;
  // Kernel family of the attention ops (engine/cuda/ops/ops.h); checked
  // against every attention op's dtype and head_dim when the executor is made.
  AttentionKernel attention_kernel = AttentionKernel::simt;
  // AttentionKernel::cudnn only: cuDNN's deterministic backward (run's
  // --deterministic-attention); the other families are deterministic already
  // in their dk/dv sums or not selectable this way.
  bool deterministic_attention = false;
};

class CudaRankExecutor : private exec::RunnerBackend {
 public:
  // The device must be current (cudaSetDevice(options.device)). The schedule
  // must be this rank's; the communicator's groups are the schedule's.
  CudaRankExecutor(const plan::Graph& graph, const plan::Policy& policy,
                   const plan::UnitPlan& units, const plan::Schedule& schedule,
                   DeviceCommunicator& comm, const exec::DataSource& data,
                   const CudaExecOptions& options);
  ~CudaRankExecutor() override;
  CudaRankExecutor(const CudaRankExecutor&) = delete;
  CudaRankExecutor& operator=(const CudaRankExecutor&) = delete;

  // Initial weights, the CPU engine's values (exec::initial_shard): every
  // rank generates its own shard from the seed, no communication.
  void init_weights(uint64_t seed);
  // Every parameter in full (graph order), all-gathered over the shard group
  // (a collective every rank must call). Meaningful with NCCL only: under
  // emulated peers the other ranks' slots are zeros.
  std::vector<std::vector<float>> gather_full_params();
  // Runs training step `step` (0-based: global batch `step`).
  exec::StepOutcome run_step(int64_t step);

  traces::Trace& trace() { return runner_->trace(); }
  int64_t optimizer_steps() const { return optimizer_steps_; }
  exec::LossScaler& loss_scaler() { return scaler_; }
  int64_t peak_allocated_bytes() const { return runner_->peak_allocated_bytes(); }
  int64_t peak_reserved_bytes() const;
  int64_t persistent_allocated_bytes() const { return runner_->persistent_allocated_bytes(); }
  const alloc::CachingAllocator& allocator() const { return *allocator_; }
  const CudaBacking& backing() const { return *backing_; }
  // Device bytes the executor holds outside the allocator (workspaces,
  // GEMM workspaces, scalars, layout tables).
  int64_t own_device_bytes() const { return own_device_bytes_; }
  // Host synchronisations of the last step: cudaEventSynchronize calls of
  // host_wait actions, plus the start and end synchronisations.
  int host_syncs_last_step() const { return host_syncs_; }
  cudaStream_t stream(int schedule_stream) const {
    return streams_[static_cast<size_t>(schedule_stream)];
  }
  const plan::Schedule& schedule() const { return s_; }
  // Tokens each expert got in the last step, [rank][router (graph order)][expert],
  // as the CPU engine's RankRun::expert_tokens: every rank's over NCCL (an
  // all-gather, outside any step), this rank's alone under emulated peers.
  // Empty without routers.
  std::vector<std::vector<std::vector<int64_t>>> gather_expert_tokens();
  // Mean of `value` over the world (an all-reduce on a device scalar, then a
  // stream synchronisation; outside any step). Emulated peers move no data:
  // the rank's own value is returned.
  double world_mean(double value);

  // Memory category of a device address: the category of the buffer whose
  // allocation made the allocator reserve the segment holding it, else other.
  traces::MemoryCategory category_at(uint64_t address) const;
  // How a CUPTI recording of this executor's steps maps onto its trace:
  // streams to the schedule's lanes, external ids to ops, addresses to categories.
  profiler::TraceMapping trace_mapping(const profiler::CuptiRecorder& recorder) const;

 private:
  // Device scalars of one step (one cudaMalloc; zeroed at the step's start).
  static constexpr int kMaxStreams = 16;
  struct StepScalars {
    double loss_sum;    // sum over micro-steps of the forward cross-entropy mean
    double norm_sq;     // squared norm of the gradient shards (all-reduced when clipping)
    float found_inf;    // inf check flag (after the all-reduce: ranks that saw inf/nan)
    float norm_sq_f32;  // fp32 copy of norm_sq for the all-reduce
    float clip;         // clip coefficient min(1, max_norm / (norm + 1e-6))
    float unused;
    double ce_micro[kMaxStreams];  // one cross-entropy's mean, per stream (scratch)
  };
  // Pinned host floats exchanged with the device around the scalar all-reduces
  // when their producer (inf check, norm) ran on the host (cpu_offload).
  struct HostExchange {
    float found_inf;
    float norm_sq;
    float mean;  // world_mean's value
  };

  // start-up and tear-down
  void release_resources() noexcept;
  void create_streams_and_events();
  void size_workspaces();
  void upload_layouts();
  void prepare_staging();
  void classify_ops();

  // RunnerBackend (the host side)
  void poll_completions() override { events_->poll(); }
  std::vector<alloc::EventId> free_events(int buffer,
                                          const plan::SmallVector<int, 4>& pending) override;
  void launch(int op, exec::LaunchBuffers&& buffers) override;
  void host_wait(int op) override;
  void* host_memory(int buffer, size_t bytes) override;
  void zero_persistent(void* address, size_t bytes) override;
  void allocated(int buffer, const alloc::Allocation& a) override;

  void first_use(int op, const std::vector<void*>& ptrs, const std::vector<exec::FirstUse>& init,
                 cudaStream_t stream);
  void finish_d2h(int op);
  void check_error_flags() const;

  // Op bodies (on the op's stream). graph_op with ptrs == nullptr launches
  // nothing and returns the stream workspace bytes the op needs.
  size_t graph_op(int index, const plan::ScheduleOp& op, const std::vector<void*>* ptrs,
                  cudaStream_t s);
  void run_fsdp_op(int index, const plan::ScheduleOp& op, const std::vector<void*>& ptrs,
                   cudaStream_t s);
  // Mixture-of-experts ops (cuda_moe_ops.cpp: moe_router, moe_dispatch,
  // moe_combine, sigmoid_gate), same contract as graph_op;
  // the message of a dispatch's error flag (its expert's row count against
  // the plan); the per-step zeroing of the routers' token counts.
  static bool is_moe_op(plan::OpType type);
  size_t moe_graph_op(int index, const plan::ScheduleOp& op, const std::vector<void*>* ptrs,
                      cudaStream_t s);
  std::string moe_flag_message(const plan::ScheduleOp& op, int32_t flag) const;
  void zero_expert_tokens(cudaStream_t s);
  void run_scalar_all_reduce(int index, const plan::ScheduleOp& op, cudaStream_t s);
  void run_host_op(const plan::ScheduleOp& op, const std::vector<void*>& ptrs);

  bool on_host_stream(int op) const {
    return s_.stream_roles[static_cast<size_t>(s_.ops[static_cast<size_t>(op)].stream)] ==
           plan::StreamRole::host;
  }
  plan::DType dtype_of(int buffer) const { return s_.buffers[static_cast<size_t>(buffer)].dtype; }
  int64_t elems_of(int buffer) const;
  std::string op_label(int op) const { return exec::op_label(g_, up_, s_, op); }
  void* device_alloc(size_t bytes);  // cudaMalloc outside the allocator (other memory)
  void* pinned_alloc(size_t bytes);  // cudaHostAlloc, zeroed

  const plan::Graph& g_;
  const plan::Policy& p_;
  const plan::UnitPlan& up_;
  const plan::Schedule& s_;
  DeviceCommunicator& comm_;
  const exec::DataSource& data_;
  CudaExecOptions opts_;
  std::vector<exec::UnitLayout> layouts_;
  std::vector<DevLayout> dev_layouts_;  // per unit
  int64_t shard_index_ = 0, reshard_index_ = 0;
  int shard_group_ = 0;

  // device resources (destroyed in reverse)
  std::vector<cudaStream_t> streams_;  // [0] = host: nullptr
  std::vector<std::unique_ptr<Blas>> blas_;
  // AttentionKernel::cudnn: one cuDNN handle + graph cache per stream that
  // runs attention; graphs built by the sizing pass (size_workspaces).
  std::vector<std::unique_ptr<CudnnAttention>> cudnn_;
  std::vector<Workspace> workspaces_;  // per stream
  std::vector<void*> own_device_;      // cudaMalloc'd by the executor
  std::vector<void*> own_pinned_;      // cudaHostAlloc'd by the executor
  int64_t own_device_bytes_ = 0;
  std::vector<cudaEvent_t> start_evt_, done_evt_;  // per op (start: timing only)
  std::vector<cudaEvent_t> join_evt_;  // per stream: joins it into compute at the step's end
  cudaEvent_t ref_evt_ = nullptr;
  int64_t ref_host_ns_ = 0;  // host clock when ref_evt_ of this step was seen complete
  // cudaEventSynchronize that also asks the communicator for asynchronous
  // errors and gives up after opts_.device_wait_timeout_ns (cuda_step.cpp).
  void wait_device(cudaEvent_t event, const std::string& what);
  int compute_ = 1;                      // schedule index of the compute stream
  StepScalars* scalars_ = nullptr;       // device
  StepScalars* scalars_host_ = nullptr;  // pinned mirror, read at the step's end
  int32_t* flags_ = nullptr;             // device, one per op: 1 + row of a bad id
  int32_t* flags_host_ = nullptr;        // pinned mirror
  HostExchange* exchange_ = nullptr;     // pinned
  float* exchange_dev_ = nullptr;        // device float for the exchange's uploads (2)

  // Per moe_router graph op, made at start-up sizing (device, own memory):
  // forced routing's cumulative slot counts (null under top-k) and the
  // step's tokens per expert.
  struct MoeRouter {
    const int64_t* forced_ends = nullptr;
    int64_t* counts = nullptr;
    int64_t experts = 0;
  };
  std::map<int, MoeRouter> moe_routers_;

  std::unique_ptr<CudaBacking> backing_;
  std::unique_ptr<alloc::CachingAllocator> allocator_;
  std::unique_ptr<CudaEventSource> events_;
  std::map<uint64_t, std::pair<uint64_t, traces::MemoryCategory>> segments_;  // base -> end, cat
  size_t segments_seen_ = 0;  // entries of backing_->segment_history() in segments_
  std::unique_ptr<exec::ScheduleRunner> runner_;  // after allocator_ (it holds a reference)

  std::vector<void*> input_staging_;       // per buffer: pinned data of graph inputs
  std::vector<void*> d2h_staging_;         // per op: pinned landing of non-fp32 d2h copies
  std::vector<uint8_t> d2h_pending_;       // per op: staged copy not yet added on the host
  std::vector<uint8_t> scalar_from_host_;  // per op: its producer (inf check, norm) ran on the host

  // step state
  float dloss_ = 1.0f;
  bool inf_on_host_ = false, norm_on_host_ = false;
  double host_found_inf_ = 0, host_norm_sq_ = 0, grad_norm_ = -1;
  bool clipped_ = false;
  int64_t optimizer_steps_ = 0;
  exec::LossScaler scaler_;
  int host_syncs_ = 0;
  std::vector<int64_t> host_op_start_, host_op_end_;  // host-stream ops (host clock)
};

}  // namespace shardscope::engine::cuda
