// Parameter state of a CUDA rank outside the step (initial weights, gathering
// the full parameters back), the world mean of a scalar, and how a CUPTI
// recording maps onto the executor's trace.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cuda/check.h"
#include "engine/cuda/exec/cuda_rank_executor.h"
#include "engine/exec/schedule_info.h"

namespace shardscope::engine::cuda {

using exec::ExecError;

namespace {

bool emulated(const DeviceCommunicator& comm) {
  return comm.kind() == CommunicatorKind::emulated;
}

// cudaMalloc'd scratch for start-up and tear-down copies, freed on scope exit.
class DeviceScratch {
 public:
  explicit DeviceScratch(size_t bytes) {
    SS_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 1)));
  }
  ~DeviceScratch() { (void)cudaFree(ptr_); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  float* get() const { return static_cast<float*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

}  // namespace

void CudaRankExecutor::init_weights(uint64_t seed) {
  for (size_t u = 0; u < up_.units.size(); ++u) {
    const exec::UnitLayout& lay = layouts_[u];
    if (lay.shard_numel() == 0) continue;
    const int shard_buffer =
        runner_->persistent_buffer(plan::BufferRole::param_shard, static_cast<int>(u));
    if (shard_buffer < 0) throw ExecError("unit " + up_.units[u].name + " has no parameter shard");
    const bool host_shard = s_.buffers[static_cast<size_t>(shard_buffer)].on_host;
    void* dst = runner_->address(shard_buffer);
    // This rank's shard straight from the seed: no broadcast, the values do
    // not depend on the world size (exec::fill_initial_shard).
    const std::vector<float> shard = exec::initial_shard(g_, lay, shard_index_, seed);
    SS_CUDA_CHECK(cudaMemcpy(dst, shard.data(), shard.size() * sizeof(float),
                             host_shard ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice));
  }
  // The whole device, not just compute: cudaMemcpy from pageable memory
  // (above) runs on the legacy default stream and may return before its DMA
  // lands, and the executor's non-blocking streams do not wait for it.
  SS_CUDA_CHECK(cudaDeviceSynchronize());
}

std::vector<std::vector<float>> CudaRankExecutor::gather_full_params() {
  cudaStream_t compute = streams_[static_cast<size_t>(compute_)];
  std::vector<std::vector<float>> out(g_.params.size());
  for (size_t u = 0; u < up_.units.size(); ++u) {
    const exec::UnitLayout& lay = layouts_[u];
    const int64_t s = lay.shard_numel();
    if (s == 0) continue;
    const int shard_buffer =
        runner_->persistent_buffer(plan::BufferRole::param_shard, static_cast<int>(u));
    if (shard_buffer < 0) throw ExecError("unit " + up_.units[u].name + " has no parameter shard");
    const bool host_shard = s_.buffers[static_cast<size_t>(shard_buffer)].on_host;
    const void* shard = runner_->address(shard_buffer);
    DeviceScratch gathered_dev(static_cast<size_t>(lay.full_numel()) * sizeof(float));
    // Emulated peers fill only this rank's slot: the others read as zeros.
    if (emulated(comm_))
      SS_CUDA_CHECK(cudaMemsetAsync(
          gathered_dev.get(), 0, static_cast<size_t>(lay.full_numel()) * sizeof(float), compute));
    float* mine = gathered_dev.get() + shard_index_ * s;
    SS_CUDA_CHECK(cudaMemcpyAsync(mine, shard, static_cast<size_t>(s) * sizeof(float),
                                  host_shard ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice,
                                  compute));
    if (lay.n() > 1)
      comm_.all_gather(shard_group_, mine, gathered_dev.get(), static_cast<size_t>(s),
                       plan::DType::f32, compute);
    std::vector<float> gathered(static_cast<size_t>(lay.full_numel()));
    SS_CUDA_CHECK(cudaMemcpyAsync(gathered.data(), gathered_dev.get(),
                                  gathered.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                  compute));
    SS_CUDA_CHECK(cudaStreamSynchronize(compute));
    std::vector<float> full(gathered.size());
    lay.gathered_to_unsharded(gathered.data(), full.data(), 4);
    for (const exec::ParamPlace& pp : lay.params())
      out[static_cast<size_t>(pp.param)].assign(full.begin() + pp.unsharded,
                                                full.begin() + pp.unsharded + pp.numel);
  }
  return out;
}

double CudaRankExecutor::world_mean(double value) {
  if (emulated(comm_)) return static_cast<float>(value);
  cudaStream_t compute = streams_[static_cast<size_t>(compute_)];
  exchange_->mean = static_cast<float>(value);
  SS_CUDA_CHECK(cudaMemcpyAsync(exchange_dev_, &exchange_->mean, sizeof(float),
                                cudaMemcpyHostToDevice, compute));
  comm_.all_reduce(0, exchange_dev_, 1, plan::DType::f32, comm::ReduceOp::avg, compute);
  SS_CUDA_CHECK(cudaMemcpyAsync(&exchange_->mean, exchange_dev_, sizeof(float),
                                cudaMemcpyDeviceToHost, compute));
  SS_CUDA_CHECK(cudaStreamSynchronize(compute));
  return exchange_->mean;
}

traces::MemoryCategory CudaRankExecutor::category_at(uint64_t address) const {
  auto it = segments_.upper_bound(address);
  if (it == segments_.begin()) return traces::MemoryCategory::other;
  --it;
  return address < it->second.first ? it->second.second : traces::MemoryCategory::other;
}

profiler::TraceMapping CudaRankExecutor::trace_mapping(
    const profiler::CuptiRecorder& recorder) const {
  profiler::TraceMapping m;
  for (size_t i = 1; i < streams_.size(); ++i)
    m.streams[recorder.stream_id(streams_[i])] = {s_.streams[i],
                                                  plan::trace_lane_kind(s_.stream_roles[i])};
  m.op_for = [this](uint64_t external_id, std::string* name, std::string* unit,
                    std::string* op_type) {
    if (external_id == 0 || external_id > s_.ops.size()) return false;
    const plan::ScheduleOp& op = s_.ops[static_cast<size_t>(external_id - 1)];
    *name = exec::op_event_name(g_, up_, op);
    *unit = op.unit >= 0 ? up_.units[static_cast<size_t>(op.unit)].name : std::string();
    *op_type = exec::op_event_type(g_, op);
    return true;
  };
  m.memory_category = [this](uint64_t address) { return category_at(address); };
  return m;
}

}  // namespace shardscope::engine::cuda
