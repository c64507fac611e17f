// GPU tests of engine/cuda/memory: CudaBacking under alloc/'s CachingAllocator
// with CudaEventSource (per-stream pools, cross-stream reuse only after the
// recorded event completed, byte accounting against cudaMemGetInfo, the
// out-of-memory retry path).
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <numeric>

#include "alloc/caching_allocator.h"
#include "alloc/errors.h"
#include "engine/cuda/check.h"
#include "engine/cuda/memory/cuda_backing.h"
#include "tests/engine/cuda/test_cuda_memory_gate.h"

using namespace shardscope;
using engine::cuda::CudaBacking;
using engine::cuda::CudaEventSource;
using engine::cuda::test::HostGate;

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Streams {
  cudaStream_t s0 = nullptr, s1 = nullptr;
  Streams() {
    SS_CUDA_CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    SS_CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  }
  ~Streams() {
    (void)cudaStreamSynchronize(s0);
    (void)cudaStreamSynchronize(s1);
    (void)cudaStreamDestroy(s0);
    (void)cudaStreamDestroy(s1);
  }
};

uint64_t live_history_bytes(const CudaBacking& backing) {
  uint64_t bytes = 0;
  for (const auto& segment : backing.segment_history()) {
    if (segment.released_ns == 0) bytes += segment.bytes;
  }
  return bytes;
}

const alloc::BlockInfo* block_at(const alloc::CachingAllocator& allocator, alloc::Address address) {
  static alloc::BlockInfo found;
  for (const auto& segment : allocator.snapshot()) {
    for (const auto& block : segment.blocks) {
      if (block.address == address) {
        found = block;
        return &found;
      }
    }
  }
  return nullptr;
}

uint64_t free_device_bytes() {
  size_t free_bytes = 0, total_bytes = 0;
  SS_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

}  // namespace

TEST_CASE("cuda backing: capacity refusal, cudaMalloc failure cleared, release checks, history") {
  SS_CUDA_CHECK(cudaFree(nullptr));  // context up
  CudaBacking backing(0, 64 * kMiB);
  const auto a = backing.reserve(40 * kMiB);
  REQUIRE(a.has_value());
  CHECK(*a % 512 == 0);
  CHECK(backing.reserved_bytes() == 40 * kMiB);
  REQUIRE(backing.segment_history().size() == 1);
  CHECK(backing.segment_history()[0].base == *a);
  CHECK(backing.segment_history()[0].bytes == 40 * kMiB);
  CHECK(backing.segment_history()[0].reserved_ns > 0);
  CHECK(backing.segment_history()[0].released_ns == 0);
  // 40 + 30 MiB > 64 MiB: refused by the capacity, cudaMalloc never called.
  CHECK_FALSE(backing.reserve(30 * kMiB).has_value());
  CHECK(backing.segment_history().size() == 1);
  // Wrong size or base: UsageError, the segment stays held.
  CHECK_THROWS_AS(backing.release(*a, 40 * kMiB + 512), alloc::UsageError);
  CHECK_THROWS_AS(backing.release(*a + 512, 40 * kMiB), alloc::UsageError);
  CHECK(backing.reserved_bytes() == 40 * kMiB);
  backing.release(*a, 40 * kMiB);
  CHECK(backing.reserved_bytes() == 0);
  CHECK(backing.peak_reserved_bytes() == 40 * kMiB);
  CHECK(backing.segment_history()[0].released_ns >= backing.segment_history()[0].reserved_ns);

  // No capacity: 1 PiB is more than any GPU has, cudaMalloc fails with
  // cudaErrorMemoryAllocation, reserve() says nullopt and clears the error.
  CudaBacking unlimited(0);
  CHECK_FALSE(unlimited.reserve(uint64_t{1} << 50).has_value());
  CHECK(cudaGetLastError() == cudaSuccess);
  const auto small = unlimited.reserve(2 * kMiB);
  REQUIRE(small.has_value());
  CHECK(unlimited.reserved_bytes() == 2 * kMiB);
}

TEST_CASE("caching allocator over cuda: per-stream pools, reuse after the other stream's event") {
  Streams streams;
  HostGate warm_up;  // loads the test kernels' module before memory is measured
  warm_up.open();
  warm_up.hold(streams.s1);
  SS_CUDA_CHECK(cudaStreamSynchronize(streams.s1));
  const uint64_t free_before = free_device_bytes();

  CudaBacking backing(0);
  CudaEventSource events({streams.s0, streams.s1});
  alloc::CachingAllocator allocator(backing);
  allocator.set_event_source(&events);
  events.set_allocator(&allocator);

  // 4 MiB rounds to 4 MiB in a 20 MiB large-pool segment per stream.
  const alloc::Allocation b = allocator.allocate(4 * kMiB, 0);
  const alloc::Address segment_a = b.address;
  const alloc::Allocation y = allocator.allocate(4 * kMiB, 1);
  REQUIRE(backing.segment_history().size() == 2);  // stream 1 did not use stream 0's remainder
  CHECK(y.address == backing.segment_history()[1].base);
  CHECK(backing.segment_history()[0].bytes == 20 * kMiB);

  // b is used on stream 1, whose work is held by the gate: freed, not reusable.
  HostGate gate;
  gate.hold(streams.s1);
  allocator.record_stream(b.handle, 1);
  allocator.free(b.handle);
  CHECK(events.outstanding() == 1);
  const alloc::Allocation c = allocator.allocate(4 * kMiB, 0);
  CHECK(c.address == segment_a + 4 * kMiB);  // from the remainder, not b's block
  CHECK(events.poll() == 0);
  const alloc::BlockInfo* pending = block_at(allocator, segment_a);
  REQUIRE(pending != nullptr);
  CHECK(pending->pending);

  gate.open();
  SS_CUDA_CHECK(cudaStreamSynchronize(streams.s1));
  CHECK_FALSE(gate.timed_out());
  CHECK(events.poll() == 1);
  CHECK(allocator.outstanding_events() == 0);
  // Best fit: b's 4 MiB block (at the segment base) before the 12 MiB remainder.
  const alloc::Allocation d = allocator.allocate(4 * kMiB, 0);
  CHECK(d.address == segment_a);

  // Reserved bytes: the allocator, the backing and its live history agree,
  // and the device lost at least that much (cudaMalloc granularity, events).
  CHECK(allocator.counters().reserved.current == 40 * kMiB);
  CHECK(backing.reserved_bytes() == 40 * kMiB);
  CHECK(live_history_bytes(backing) == 40 * kMiB);
  CHECK(free_before - free_device_bytes() >= 40 * kMiB);
}

TEST_CASE(
    "caching allocator over cuda: an executor event from record() delays reuse until polled") {
  Streams streams;
  CudaBacking backing(0);
  CudaEventSource events({streams.s0, streams.s1});
  alloc::CachingAllocator allocator(backing);
  allocator.set_event_source(&events);
  events.set_allocator(&allocator);

  const alloc::Allocation a = allocator.allocate(512 * 1024, 0);  // small pool, 2 MiB segment
  HostGate gate;
  gate.hold(streams.s1);
  const alloc::EventId last_use = events.record(streams.s1);
  CHECK(last_use >= 1);
  allocator.free(a.handle, {last_use});
  const alloc::Allocation b = allocator.allocate(512 * 1024, 0);
  CHECK(b.address == a.address + 512 * 1024);
  CHECK(events.poll() == 0);
  gate.open();
  SS_CUDA_CHECK(cudaStreamSynchronize(streams.s1));
  CHECK(events.poll() == 1);
  const alloc::Allocation c = allocator.allocate(512 * 1024, 0);
  CHECK(c.address == a.address);
  CHECK(backing.segment_history().size() == 1);
}

TEST_CASE("caching allocator over cuda: 64 MiB capacity, synchronize and release retry, then OOM") {
  Streams streams;
  CudaBacking backing(0, 64 * kMiB);
  CudaEventSource events({streams.s0, streams.s1});
  alloc::CachingAllocator allocator(backing);
  allocator.set_event_source(&events);
  events.set_allocator(&allocator);

  // 40 MiB >= 10 MiB: a segment of its own size.
  const alloc::Allocation x = allocator.allocate(40 * kMiB, 0);
  CHECK(backing.reserved_bytes() == 40 * kMiB);
  engine::cuda::test::launch_spin(streams.s1, 50'000'000);  // stream 1 busy for 50 ms
  allocator.record_stream(x.handle, 1);
  allocator.free(x.handle);

  // x waits on stream 1's event: 40 + 40 MiB is refused, the allocator
  // synchronizes (cudaEventSynchronize), releases x's segment and retries.
  const alloc::Allocation y = allocator.allocate(40 * kMiB, 0);
  CHECK(allocator.stats().alloc_retries == 1);
  CHECK(allocator.stats().synchronizations == 1);
  CHECK(allocator.stats().segment_releases == 1);
  CHECK(events.outstanding() == 0);
  CHECK(backing.reserved_bytes() == 40 * kMiB);
  CHECK(cudaStreamQuery(streams.s1) == cudaSuccess);  // the spin kernel was waited for

  // 40 + 30 MiB: nothing to release, OutOfMemory after the retry.
  try {
    (void)allocator.allocate(30 * kMiB, 0);
    FAIL("no OutOfMemory");
  } catch (const alloc::OutOfMemory& oom) {
    CHECK(oom.info().capacity_bytes == 64 * kMiB);
    CHECK(oom.info().segment_bytes == 30 * kMiB);
    CHECK(oom.info().reserved_bytes == 40 * kMiB);
  }
  CHECK(allocator.stats().ooms == 1);
  CHECK(allocator.stats().alloc_retries == 2);
  allocator.free(y.handle);
}
