// Test helpers that hold a stream busy (GPU tests of engine/cuda/memory and
// engine/cuda/comm): a kernel that spins until the host opens a gate, and a
// kernel that spins for a given time. Both occupy one thread of one block.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace shardscope::engine::cuda::test {

// A host-mapped word the host writes and a kernel polls: the stream it was
// launched on stays busy, deterministically, until open().
class HostGate {
 public:
  HostGate();
  ~HostGate();
  HostGate(const HostGate&) = delete;
  HostGate& operator=(const HostGate&) = delete;

  // Enqueues the waiting kernel; it gives up after timeout_ns of device time
  // (then timed_out() is true once it finished), so a failed test cannot hang.
  void hold(cudaStream_t stream, int64_t timeout_ns = 20'000'000'000);
  void open();
  bool timed_out() const;

 private:
  volatile uint32_t* host_ = nullptr;  // [0] gate, [1] timed out
  uint32_t* device_ = nullptr;
};

// Enqueues a kernel that spins for `ns` nanoseconds of device time (%globaltimer).
void launch_spin(cudaStream_t stream, int64_t ns);

// Loads the gate and spin kernels into the current context now. Under CUDA's
// lazy loading (default since 12.2) a kernel's first launch loads it, and
// loading may synchronise the context: the first launch_spin issued while
// another stream is held (a gate, an emulated collective's wait) would then
// start only once that stream is released. Tests that time a kernel against
// held streams call this before holding them.
void preload_test_kernels();

}  // namespace shardscope::engine::cuda::test
