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
//
// Neither class is thread-safe: like the allocator, each belongs to the
// executor thread of its device. Both remember their device and make it
// current around their CUDA calls (ScopedDevice).
//
// CUDA failures throw CudaError, also from the EventSource methods, whose
// contract asks them not to throw: a failed cudaEventRecord means the device
// context is broken (sticky error), the run is over and the allocator is not
// used again (the engine never continues after a failed CUDA call).
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
  // Throws CudaError when the runtime finds no driver or no such device
  // (the message names the runtime error, e.g. cudaErrorInsufficientDriver).
  explicit CudaBacking(int device, uint64_t capacity_bytes = 0);
  ~CudaBacking() override;  // cudaFree of whatever is still held
  CudaBacking(const CudaBacking&) = delete;
  CudaBacking& operator=(const CudaBacking&) = delete;

  // std::nullopt on cudaErrorMemoryAllocation (the error is cleared) or when
  // capacity would be exceeded; any other CUDA error throws CudaError.
  // cudaMalloc's alignment (>= 256 B) covers the allocator's 512 B blocks.
  std::optional<alloc::Address> reserve(uint64_t bytes) override;
  // alloc::UsageError for a base it did not hand out or a size mismatch;
  // CudaError when cudaFree fails (the segment is forgotten either way).
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
  int device() const { return device_; }

 private:
  int device_;
  uint64_t capacity_;
  uint64_t reserved_ = 0, peak_reserved_ = 0;
  std::unordered_map<alloc::Address, size_t> live_;  // base -> index in history_
  std::vector<SegmentRecord> history_;
};

// cudaEvents for the allocator. Streams are the executor's: stream id i of the
// allocator is streams[i], all on the device current at construction. poll()
// reports completed events to the allocator (cudaEventQuery, no blocking);
// synchronize() blocks on the outstanding ones (the allocator's
// out-of-memory retry and empty_cache()). Events are created with
// cudaEventDisableTiming and pooled: a completed one is recorded again later.
// Ids come from one counter starting at 1, for record_event() and record().
class CudaEventSource final : public alloc::EventSource {
 public:
  // Throws CudaError when the runtime finds no driver or device.
  explicit CudaEventSource(std::vector<cudaStream_t> streams);
  ~CudaEventSource() override;  // destroys its events (pooled)
  CudaEventSource(const CudaEventSource&) = delete;
  CudaEventSource& operator=(const CudaEventSource&) = delete;

  void set_allocator(alloc::CachingAllocator* allocator) { allocator_ = allocator; }
  // alloc::UsageError for a stream id outside streams; CudaError.
  alloc::EventId record_event(alloc::StreamId stream) override;
  // cudaEventSynchronize on each of `outstanding` that is still ours; true.
  bool synchronize(const std::vector<alloc::EventId>& outstanding) override;
  // Records an event on `stream` now, for the executor's own use with
  // CachingAllocator::free(handle, {id}) (a buffer's last use on another
  // stream). Pass it to free() before the next poll(): poll() may report it
  // completed, and an id reported before free() keeps the block pending
  // until a synchronize (the allocator's rule).
  alloc::EventId record(cudaStream_t stream);
  // Queries the outstanding events in id order (cudaEventQuery) and reports
  // each completed one to the allocator (event_completed, when set); returns
  // how many completed. CudaError on a query error other than cudaErrorNotReady.
  size_t poll();
  // Events recorded and not yet seen completed.
  size_t outstanding() const { return outstanding_.size(); }

 private:
  int device_ = 0;
  std::vector<cudaStream_t> streams_;
  alloc::CachingAllocator* allocator_ = nullptr;
  alloc::EventId next_id_ = 1;
  std::map<alloc::EventId, cudaEvent_t> outstanding_;
  std::vector<cudaEvent_t> pool_;  // completed events for reuse
};

}  // namespace shardscope::engine::cuda
