#include "engine/cuda/memory/cuda_backing.h"

#include <string>

#include "alloc/errors.h"
#include "engine/cuda/check.h"
#include "engine/cuda/memory/scoped_device.h"
#include "profiler/host_clock.h"

namespace shardscope::engine::cuda {

namespace {

// reserved + bytes > capacity, without overflow; capacity 0 = unlimited.
bool exceeds(uint64_t reserved, uint64_t bytes, uint64_t capacity) {
  return capacity != 0 && (bytes > capacity || reserved > capacity - bytes);
}

std::string hex_address(alloc::Address address) {
  static const char digits[] = "0123456789abcdef";
  std::string text;
  do {
    text.insert(text.begin(), digits[address & 0xf]);
    address >>= 4;
  } while (address != 0);
  return "0x" + text;
}

}  // namespace

CudaBacking::CudaBacking(int device, uint64_t capacity_bytes)
    : device_(device), capacity_(capacity_bytes) {
  int count = 0;
  SS_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    throw CudaError("CudaBacking: device " + std::to_string(device) + " does not exist (" +
                    std::to_string(count) + " CUDA devices)");
  }
}

CudaBacking::~CudaBacking() {
  if (live_.empty()) return;
  int previous = 0;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                        cudaSetDevice(device_) == cudaSuccess;
  for (const auto& entry : live_) (void)cudaFree(reinterpret_cast<void*>(entry.first));
  if (switched) (void)cudaSetDevice(previous);
}

std::optional<alloc::Address> CudaBacking::reserve(uint64_t bytes) {
  if (exceeds(reserved_, bytes, capacity_)) return std::nullopt;
  ScopedDevice on_device(device_);
  // cudaMalloc(0) gives nullptr: a zero-byte segment still gets an address of its own.
  const size_t span = bytes == 0 ? 1 : static_cast<size_t>(bytes);
  void* memory = nullptr;
  const cudaError_t err = cudaMalloc(&memory, span);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so later checks do not see it
    return std::nullopt;
  }
  check_cuda(err, "cudaMalloc", __FILE__, __LINE__);
  const auto base = reinterpret_cast<alloc::Address>(memory);
  live_.emplace(base, history_.size());
  history_.push_back(SegmentRecord{base, bytes, profiler::host_now_ns(), 0});
  reserved_ += bytes;
  if (reserved_ > peak_reserved_) peak_reserved_ = reserved_;
  return base;
}

void CudaBacking::release(alloc::Address base, uint64_t bytes) {
  const auto it = live_.find(base);
  if (it == live_.end() || history_[it->second].bytes != bytes) {
    throw alloc::UsageError("CudaBacking::release: segment at " + hex_address(base) + " of " +
                            std::to_string(bytes) + " bytes was not reserved here");
  }
  history_[it->second].released_ns = profiler::host_now_ns();
  live_.erase(it);
  reserved_ -= bytes;
  ScopedDevice on_device(device_);
  SS_CUDA_CHECK(cudaFree(reinterpret_cast<void*>(base)));
}

}  // namespace shardscope::engine::cuda
