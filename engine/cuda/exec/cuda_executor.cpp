// Start-up and tear-down of CudaRankExecutor: streams, events, workspaces
// (sized from every op of the schedule), layout tables, step scalars, pinned
// staging, the allocator and the persistent buffers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/exec/cuda_rank_executor.h"
#include "engine/exec/schedule_info.h"
#include "profiler/host_clock.h"

namespace shardscope::engine::cuda {

using exec::ExecError;
using plan::OpKind;

CudaRankExecutor::CudaRankExecutor(const plan::Graph& graph, const plan::Policy& policy,
                                   const plan::UnitPlan& units, const plan::Schedule& schedule,
                                   DeviceCommunicator& comm, const exec::DataSource& data,
                                   const CudaExecOptions& options)
    : g_(graph), p_(policy), up_(units), s_(schedule), comm_(comm), data_(data), opts_(options) {
  if (s_.rank != comm_.rank())
    throw ExecError("schedule of rank " + std::to_string(s_.rank) + " given to rank " +
                    std::to_string(comm_.rank()));
  if (comm_.groups().size() != s_.groups.size())
    throw ExecError("communicator groups do not match the schedule's");
  if (s_.streams.size() > static_cast<size_t>(kMaxStreams))
    throw ExecError("schedule has " + std::to_string(s_.streams.size()) +
                    " streams; the CUDA engine handles at most " + std::to_string(kMaxStreams));
  compute_ = s_.stream_index(plan::StreamRole::compute);
  if (compute_ < 1) throw ExecError("schedule has no compute stream");
  const int64_t n = s_.world.shard_group_size;
  for (const plan::Unit& u : up_.units) layouts_.emplace_back(g_, u, p_.flavor, n);
  const exec::GroupIndices gi = exec::group_indices(s_);
  shard_index_ = gi.shard_index;
  reshard_index_ = gi.reshard_index;
  shard_group_ = gi.shard_group;
  scaler_ = exec::LossScaler::from_policy(p_);

  const size_t nb = s_.buffers.size(), no = s_.ops.size();
  input_staging_.assign(nb, nullptr);
  d2h_staging_.assign(no, nullptr);
  d2h_pending_.assign(no, 0);
  host_op_start_.assign(no, 0);
  host_op_end_.assign(no, 0);

  try {
    create_streams_and_events();
    size_workspaces();
    upload_layouts();
    scalars_ = static_cast<StepScalars*>(device_alloc(sizeof(StepScalars)));
    scalars_host_ = static_cast<StepScalars*>(pinned_alloc(sizeof(StepScalars)));
    flags_ = static_cast<int32_t*>(device_alloc(std::max<size_t>(no, 1) * sizeof(int32_t)));
    flags_host_ = static_cast<int32_t*>(pinned_alloc(std::max<size_t>(no, 1) * sizeof(int32_t)));
    exchange_ = static_cast<HostExchange*>(pinned_alloc(sizeof(HostExchange)));
    exchange_dev_ = static_cast<float*>(device_alloc(2 * sizeof(float)));
    prepare_staging();

    backing_ = std::make_unique<CudaBacking>(opts_.device);
    // Expandable segments (cuMemMap) are not implemented by CudaBacking: the
    // allocator throws UnsupportedConfig for them.
    allocator_ = std::make_unique<alloc::CachingAllocator>(
        *backing_, alloc::AllocatorConfig{alloc::Mode::caching, s_.expandable_segments});
    // Allocator stream id i is schedule stream i; the host (0) never owns a
    // device buffer and stands for compute should it ever be asked.
    std::vector<cudaStream_t> pool_streams = streams_;
    pool_streams[0] = streams_[static_cast<size_t>(compute_)];
    events_ = std::make_unique<CudaEventSource>(pool_streams);
    events_->set_allocator(allocator_.get());
    allocator_->set_event_source(events_.get());
    // Recording (one lane per schedule stream), buffers and the step's actions.
    runner_ = std::make_unique<exec::ScheduleRunner>(g_, up_, s_, *allocator_,
                                                     static_cast<exec::RunnerBackend&>(*this),
                                                     traces::Source::engine_cuda,
                                                     /*label_errors=*/true);
    runner_->rank_trace().device = opts_.device;
    classify_ops();
    // Persistent buffers exist before the first step (zeroed): device ones
    // from the allocator, host ones (cpu_offload) pinned.
    runner_->allocate_persistent();
    // Start-up copies and memsets ran on the legacy default stream, which the
    // non-blocking streams do not wait for.
    SS_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (...) {
    release_resources();
    throw;
  }
}

CudaRankExecutor::~CudaRankExecutor() {
  release_resources();
}

void CudaRankExecutor::release_resources() noexcept {
  // Nothing may be in flight on memory about to be freed. After a sticky
  // CUDA error (the context is unusable) cudaFree fails, and the allocator's
  // destructor, which cannot report it, would terminate: its host-side state
  // is leaked instead (the process is going down with its context anyway).
  const bool healthy = cudaDeviceSynchronize() == cudaSuccess;
  (void)cudaGetLastError();
  runner_.reset();
  if (healthy) {
    allocator_.reset();
  } else {
    (void)allocator_.release();
  }
  events_.reset();
  backing_.reset();
  blas_.clear();
  cudnn_.clear();
  for (cudaEvent_t e : start_evt_)
    if (e) (void)cudaEventDestroy(e);
  for (cudaEvent_t e : done_evt_)
    if (e) (void)cudaEventDestroy(e);
  for (cudaEvent_t e : join_evt_)
    if (e) (void)cudaEventDestroy(e);
  if (ref_evt_) (void)cudaEventDestroy(ref_evt_);
  start_evt_.clear();
  done_evt_.clear();
  join_evt_.clear();
  ref_evt_ = nullptr;
  for (void* p : own_device_) (void)cudaFree(p);
  for (void* p : own_pinned_) (void)cudaFreeHost(p);
  own_device_.clear();
  own_pinned_.clear();
  for (cudaStream_t st : streams_)
    if (st) (void)cudaStreamDestroy(st);
  streams_.clear();
  (void)cudaGetLastError();
}

// ---- start-up -------------------------------------------------------------------

void* CudaRankExecutor::device_alloc(size_t bytes) {
  void* p = nullptr;
  SS_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
  own_device_.push_back(p);
  own_device_bytes_ += static_cast<int64_t>(bytes);
  return p;
}

void* CudaRankExecutor::pinned_alloc(size_t bytes) {
  void* p = nullptr;
  SS_CUDA_CHECK(cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault));
  own_pinned_.push_back(p);
  std::memset(p, 0, std::max<size_t>(bytes, 1));
  return p;
}

// Scalar all-reduces (where their producer ran), the d2h invariant and the
// all-gather outputs to zero under emulated peers (only this rank's slot is
// ever written there). Needs the runner.
void CudaRankExecutor::classify_ops() {
  const size_t no = s_.ops.size();
  scalar_from_host_.assign(no, 0);
  const bool emulated = comm_.kind() == CommunicatorKind::emulated;
  std::vector<int> d2h_into(s_.buffers.size(), 0);
  for (size_t i = 0; i < no; ++i) {
    const plan::ScheduleOp& op = s_.ops[i];
    // The output is the last buffer (fsdp2's in-place all-gather has only it).
    if (emulated && op.kind == OpKind::all_gather && !op.buffers.empty())
      runner_->zero_at_alloc(op.buffers.back());
    if (op.kind == OpKind::all_reduce && op.buffers.empty()) {
      if (op.purpose != plan::OpPurpose::inf_flag && op.purpose != plan::OpPurpose::norm_sq)
        throw ExecError("scalar all-reduce " + std::to_string(i) +
                        " carries neither an inf flag nor a squared norm");
      const OpKind producer =
          op.purpose == plan::OpPurpose::inf_flag ? OpKind::inf_check : OpKind::grad_norm;
      for (int w : op.waits)
        if (s_.ops[static_cast<size_t>(w)].kind == producer)
          scalar_from_host_[i] = on_host_stream(w) ? 1 : 0;
    }
    if (op.kind == OpKind::d2h && op.buffers.size() >= 2 &&
        ++d2h_into[static_cast<size_t>(op.buffers[1])] > 1)
      throw ExecError("buffer '" +
                      plan::buffer_name(g_, s_.buffers[static_cast<size_t>(op.buffers[1])]) +
                      "' receives more than one device-to-host copy per step; the CUDA engine "
                      "copies each reduced shard straight into its zeroed host shard");
  }
}

void CudaRankExecutor::create_streams_and_events() {
  int least = 0, greatest = 0;
  SS_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  const size_t ns = s_.streams.size();
  streams_.assign(ns, nullptr);
  join_evt_.assign(ns, nullptr);
  for (size_t i = 1; i < ns; ++i) {
    // Communication streams at the greatest priority (as NCCL/PyTorch's are).
    const bool comm = plan::trace_lane_kind(s_.stream_roles[i]) == traces::LaneKind::comm;
    SS_CUDA_CHECK(
        cudaStreamCreateWithPriority(&streams_[i], cudaStreamNonBlocking, comm ? greatest : least));
    SS_CUDA_CHECK(cudaEventCreateWithFlags(&join_evt_[i], cudaEventDisableTiming));
  }
  // One GEMM handle per stream that runs linear layers.
  blas_.resize(ns);
  for (const plan::ScheduleOp& op : s_.ops) {
    if (op.graph_op < 0 || g_.ops[static_cast<size_t>(op.graph_op)].type != plan::OpType::linear)
      continue;
    auto& b = blas_[static_cast<size_t>(op.stream)];
    if (!b) b = std::make_unique<Blas>();
  }
  // One cuDNN attention (handle + graphs) per stream that runs attention.
  cudnn_.resize(ns);
  for (const plan::ScheduleOp& op : s_.ops) {
    if (opts_.attention_kernel != AttentionKernel::cudnn || op.graph_op < 0 ||
        g_.ops[static_cast<size_t>(op.graph_op)].type != plan::OpType::attention)
      continue;
    auto& c = cudnn_[static_cast<size_t>(op.stream)];
    if (!c) c = std::make_unique<CudnnAttention>(opts_.deterministic_attention);
  }
  // Per op: completion (waits, host waits, timing end) and, without CUPTI, start.
  const bool timing = opts_.recorder == nullptr;
  const unsigned done_flags = timing ? cudaEventDefault : cudaEventDisableTiming;
  start_evt_.assign(s_.ops.size(), nullptr);
  done_evt_.assign(s_.ops.size(), nullptr);
  for (size_t i = 0; i < s_.ops.size(); ++i) {
    if (on_host_stream(static_cast<int>(i))) continue;
    SS_CUDA_CHECK(cudaEventCreateWithFlags(&done_evt_[i], done_flags));
    if (timing) SS_CUDA_CHECK(cudaEventCreateWithFlags(&start_evt_[i], cudaEventDefault));
  }
  SS_CUDA_CHECK(cudaEventCreateWithFlags(&ref_evt_, cudaEventDefault));
}

// Per stream: the largest workspace any of its ops needs (ops of one stream
// run one after another, so they share it).
void CudaRankExecutor::size_workspaces() {
  std::vector<size_t> bytes(s_.streams.size(), 0);
  for (size_t i = 0; i < s_.ops.size(); ++i) {
    const plan::ScheduleOp& op = s_.ops[i];
    if (on_host_stream(static_cast<int>(i))) continue;
    size_t need = 0;
    if (op.kind == OpKind::forward || op.kind == OpKind::backward || op.kind == OpKind::recompute) {
      need = graph_op(static_cast<int>(i), op, nullptr, nullptr);
    } else if (op.kind == OpKind::grad_norm) {
      for (int b : op.buffers) need = std::max(need, squared_norm_workspace_bytes(elems_of(b)));
    }
    bytes[static_cast<size_t>(op.stream)] = std::max(bytes[static_cast<size_t>(op.stream)], need);
  }
  workspaces_.assign(s_.streams.size(), Workspace{});
  for (size_t st = 0; st < bytes.size(); ++st)
    if (bytes[st] > 0) workspaces_[st] = Workspace{device_alloc(bytes[st]), bytes[st]};
}

// fsdp2 units' parameter tables for the layout kernels (exec_kernels.h).
void CudaRankExecutor::upload_layouts() {
  std::vector<int64_t> table;
  std::vector<size_t> at(layouts_.size(), 0);
  dev_layouts_.assign(layouts_.size(), DevLayout{});
  for (size_t u = 0; u < layouts_.size(); ++u) {
    const exec::UnitLayout& l = layouts_[u];
    DevLayout& d = dev_layouts_[u];
    d.shard_numel = l.shard_numel();
    d.full_numel = l.full_numel();
    d.identity = p_.flavor == plan::Flavor::fsdp1 || l.params().empty() || l.shard_numel() == 0;
    if (d.identity) continue;
    d.count = static_cast<int32_t>(l.params().size());
    at[u] = table.size();
    for (const exec::ParamPlace& pp : l.params()) table.push_back(pp.shard_offset);
    for (const exec::ParamPlace& pp : l.params()) table.push_back(pp.chunk);
    for (const exec::ParamPlace& pp : l.params()) table.push_back(pp.unsharded);
  }
  if (table.empty()) return;
  auto* dev = static_cast<int64_t*>(device_alloc(table.size() * sizeof(int64_t)));
  SS_CUDA_CHECK(
      cudaMemcpy(dev, table.data(), table.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
  for (size_t u = 0; u < layouts_.size(); ++u)
    if (!dev_layouts_[u].identity) dev_layouts_[u].table = dev + at[u];
}

// Pinned host memory: graph inputs' data (per buffer: one per micro-step, kept
// until the step's end) and non-fp32 device-to-host landings (per op).
void CudaRankExecutor::prepare_staging() {
  for (size_t b = 0; b < s_.buffers.size(); ++b) {
    const plan::Buffer& buf = s_.buffers[b];
    if (buf.role == plan::BufferRole::input && !buf.on_host)
      input_staging_[b] = pinned_alloc(static_cast<size_t>(buf.bytes));
  }
  for (size_t i = 0; i < s_.ops.size(); ++i) {
    const plan::ScheduleOp& op = s_.ops[i];
    if (op.kind != OpKind::d2h || op.buffers.empty()) continue;
    const int src = op.buffers[0];
    if (dtype_of(src) != plan::DType::f32)
      d2h_staging_[i] =
          pinned_alloc(static_cast<size_t>(s_.buffers[static_cast<size_t>(src)].bytes));
  }
}

// ---- small helpers ---------------------------------------------------------------

int64_t CudaRankExecutor::elems_of(int buffer) const {
  return s_.buffers[static_cast<size_t>(buffer)].bytes / plan::dtype_bytes(dtype_of(buffer));
}

int64_t CudaRankExecutor::peak_reserved_bytes() const {
  return static_cast<int64_t>(allocator_->counters().reserved.peak);
}

}  // namespace shardscope::engine::cuda
