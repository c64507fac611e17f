// Device memory for alloc/'s CachingAllocator (the same class the CPU engine
// and the simulator use): CudaBacking hands out segments from cudaMalloc and
// returns them with cudaFree; CudaEventSource implements the allocator's
// EventSource with cudaEvents so that a block freed while another stream
// still uses it is reused only once that stream's recorded work is done
// (PyTorch's record_stream / insert_events), per-stream pools being the
// allocator's own rule.
//
// The segments handed out are remembered (base, bytes) so that the CUPTI
// recorder can tell the allocator's cudaMalloc calls from other allocations
// (cuBLAS workspace, NCCL buffers, ...).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "alloc/backing.h"
#include "alloc/caching_allocator.h"

namespace shardscope::engine::cuda {

class CudaBacking final : public alloc::Backing {
 public:
  // capacity_bytes 0 = the device's free memory decides (cudaMalloc fails).
  explicit CudaBacking(int device, uint64_t capacity_bytes = 0);
  ~CudaBacking() override;  // cudaFree of whatever is still held
  CudaBacking(const CudaBacking&) = delete;
  CudaBacking& operator=(const CudaBacking&) = delete;

  // std::nullopt on cudaErrorMemoryAllocation (the error is cleared) or when
  // capacity would be exceeded; any other CUDA error throws CudaError.
  std::optional<alloc::Address> reserve(uint64_t bytes) override;
  void release(alloc::Address base, uint64_t bytes) override;
  uint64_t capacity_bytes() const override { return capacity_; }
  uint64_t reserved_bytes() const override { return reserved_; }
  // Peak of reserved_bytes() since construction.
  uint64_t peak_reserved_bytes() const { return peak_reserved_; }

  // Every segment ever handed out, with the host time (profiler::host_now_ns)
  // of its reserve and release (0 = still held): lets the CUPTI MEMORY2
  // records be split into the allocator's segments and other allocations.
  struct SegmentRecord {
    alloc::Address base = 0;
    uint64_t bytes = 0;
    int64_t reserved_ns = 0, released_ns = 0;
  };
  const std::vector<SegmentRecord>& segment_history() const { return history_; }

 private:
  int device_;
  uint64_t capacity_;
  uint64_t reserved_ = 0, peak_reserved_ = 0;
  std::unordered_map<alloc::Address, size_t> live_;  // base -> index in history_
  std::vector<SegmentRecord> history_;
};

// cudaEvents for the allocator. Streams are the executor's: stream id i of the
// allocator is streams[i]. poll() reports completed events to the allocator
// (cudaEventQuery, no blocking); synchronize() blocks on the outstanding ones
// (the allocator's out-of-memory retry and empty_cache()).
class CudaEventSource final : public alloc::EventSource {
 public:
  explicit CudaEventSource(std::vector<cudaStream_t> streams);
  ~CudaEventSource() override;  // destroys its events (pooled)
  CudaEventSource(const CudaEventSource&) = delete;
  CudaEventSource& operator=(const CudaEventSource&) = delete;

  void set_allocator(alloc::CachingAllocator* allocator) { allocator_ = allocator; }
  alloc::EventId record_event(alloc::StreamId stream) override;
  bool synchronize(const std::vector<alloc::EventId>& outstanding) override;
  // Records an event on `stream` now, for the executor's own use with
  // CachingAllocator::free(handle, {id}) (a buffer's last use on another stream).
  alloc::EventId record(cudaStream_t stream);
  // Reports every completed event to the allocator (event_completed); returns how many.
  size_t poll();

 private:
  std::vector<cudaStream_t> streams_;
  alloc::CachingAllocator* allocator_ = nullptr;
  alloc::EventId next_id_ = 1;
  std::map<alloc::EventId, cudaEvent_t> outstanding_;
  std::vector<cudaEvent_t> pool_;  // completed events for reuse
};

}  // namespace shardscope::engine::cuda
