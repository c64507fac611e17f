// Helpers of the GPU communicator tests: device buffers from host vectors and
// back, bf16 bit patterns of exactly representable floats, timed events.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/cuda/check.h"

namespace shardscope::engine::cuda::test {

// A float whose low 16 mantissa bits are zero is exactly a bf16: its upper half.
inline uint16_t exact_bf16(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);
}

template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& values) : size_(values.size()) {
    SS_CUDA_CHECK(cudaMalloc(&data_, bytes()));
    SS_CUDA_CHECK(cudaMemcpy(data_, values.data(), bytes(), cudaMemcpyHostToDevice));
    // cudaMemcpy from pageable memory may return before its DMA (on the legacy
    // default stream) lands; the tests' non-blocking streams do not wait for it.
    SS_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  }
  ~DeviceVector() { (void)cudaFree(data_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;

  T* get() const { return data_; }
  size_t bytes() const { return size_ * sizeof(T); }
  std::vector<T> read() const {
    std::vector<T> values(size_);
    SS_CUDA_CHECK(cudaMemcpy(values.data(), data_, bytes(), cudaMemcpyDeviceToHost));
    return values;
  }

 private:
  size_t size_;
  T* data_ = nullptr;
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { SS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() {
    (void)cudaStreamSynchronize(s);
    (void)cudaStreamDestroy(s);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// A timing event; ms_since(other) = cudaEventElapsedTime(other, this).
struct TimedEvent {
  cudaEvent_t e = nullptr;
  TimedEvent() { SS_CUDA_CHECK(cudaEventCreate(&e)); }
  ~TimedEvent() { (void)cudaEventDestroy(e); }
  TimedEvent(const TimedEvent&) = delete;
  TimedEvent& operator=(const TimedEvent&) = delete;
  void record(cudaStream_t stream) { SS_CUDA_CHECK(cudaEventRecord(e, stream)); }
  float ms_since(const TimedEvent& earlier) const {
    SS_CUDA_CHECK(cudaEventSynchronize(e));
    float ms = 0;
    SS_CUDA_CHECK(cudaEventElapsedTime(&ms, earlier.e, e));
    return ms;
  }
};

}  // namespace shardscope::engine::cuda::test
