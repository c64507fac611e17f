#include <string>
#include <utility>

#include "alloc/errors.h"
#include "engine/cuda/check.h"
#include "engine/cuda/memory/cuda_backing.h"
#include "engine/cuda/memory/scoped_device.h"

namespace shardscope::engine::cuda {

CudaEventSource::CudaEventSource(std::vector<cudaStream_t> streams) : streams_(std::move(streams)) {
  SS_CUDA_CHECK(cudaGetDevice(&device_));
}

CudaEventSource::~CudaEventSource() {
  // Destroying an event still pending in a stream is allowed: the driver
  // releases it once the stream passes it.
  for (const auto& entry : outstanding_) (void)cudaEventDestroy(entry.second);
  for (cudaEvent_t event : pool_) (void)cudaEventDestroy(event);
}

alloc::EventId CudaEventSource::record_event(alloc::StreamId stream) {
  if (stream >= streams_.size()) {
    throw alloc::UsageError("CudaEventSource::record_event: stream id " + std::to_string(stream) +
                            " is not one of the " + std::to_string(streams_.size()) +
                            " streams given at construction");
  }
  return record(streams_[stream]);
}

alloc::EventId CudaEventSource::record(cudaStream_t stream) {
  ScopedDevice on_device(device_);
  cudaEvent_t event = nullptr;
  if (pool_.empty()) {
    SS_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  } else {
    event = pool_.back();
    pool_.pop_back();
  }
  const cudaError_t err = cudaEventRecord(event, stream);
  if (err != cudaSuccess) {
    pool_.push_back(event);
    check_cuda(err, "cudaEventRecord", __FILE__, __LINE__);
  }
  const alloc::EventId id = next_id_++;
  outstanding_.emplace(id, event);
  return id;
}

bool CudaEventSource::synchronize(const std::vector<alloc::EventId>& outstanding) {
  ScopedDevice on_device(device_);
  for (alloc::EventId id : outstanding) {
    const auto it = outstanding_.find(id);
    if (it == outstanding_.end()) continue;  // already seen completed by poll()
    SS_CUDA_CHECK(cudaEventSynchronize(it->second));
    pool_.push_back(it->second);
    outstanding_.erase(it);
  }
  return true;
}

size_t CudaEventSource::poll() {
  ScopedDevice on_device(device_);
  size_t completed = 0;
  for (auto it = outstanding_.begin(); it != outstanding_.end();) {
    const cudaError_t err = cudaEventQuery(it->second);
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();  // not an error: do not leave it for the next check
      ++it;
      continue;
    }
    check_cuda(err, "cudaEventQuery", __FILE__, __LINE__);
    const alloc::EventId id = it->first;
    pool_.push_back(it->second);
    it = outstanding_.erase(it);
    ++completed;
    if (allocator_ != nullptr) allocator_->event_completed(id);
  }
  return completed;
}

}  // namespace shardscope::engine::cuda
