// CUPTI recorder on a GPU: a known sequence of allocations, copies, kernels on
// two streams and a memset, recorded and checked record by record; the
// one-recorder limit; NVTX ranges; and `shardscope profile` injecting the
// recorder into a separate CUDA program (cupti_sample.cu).
#include <catch2/catch.hpp>

#include <cuda_runtime.h>
#include <cupti.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "profiler/cupti/cupti_recorder.h"
#include "profiler/host_clock.h"
#include "tests/profiler/cupti_test_kernels.h"
#include "tests/temp_dir.h"
#include "traces/trace_io.h"

using namespace shardscope;
using profiler::CuptiRecorder;

#define CUDA_REQUIRE(call) REQUIRE((call) == cudaSuccess)

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr long long kSpinCycles = 2'000'000;  // ~1 ms at H100 clocks

template <class R>
const R& only(const std::vector<R>& records, const std::string& what, bool (*match)(const R&)) {
  const R* found = nullptr;
  for (const R& r : records)
    if (match(r)) {
      INFO(what);
      REQUIRE(found == nullptr);
      found = &r;
    }
  INFO(what);
  REQUIRE(found != nullptr);
  return *found;
}

// libcupti's path, for NVTX_INJECTION64_PATH (NVTX reads it at its first call).
std::string cupti_library_path() {
  Dl_info info;
  REQUIRE(dladdr(reinterpret_cast<void*>(&cuptiGetVersion), &info) != 0);
  return info.dli_fname;
}

}  // namespace

TEST_CASE("CUPTI records a known sequence with the right streams, sizes and host times",
          "[gpu][cupti]") {
  // Before the process's first NVTX call: NVTX ranges go to CUPTI.
  setenv("NVTX_INJECTION64_PATH", cupti_library_path().c_str(), 1);
  auto recorder = CuptiRecorder::start();
  const int64_t t0 = profiler::host_now_ns();

  cudaStream_t a = nullptr, b = nullptr;
  CUDA_REQUIRE(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CUDA_REQUIRE(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaEvent_t a_done = nullptr;
  CUDA_REQUIRE(cudaEventCreateWithFlags(&a_done, cudaEventDisableTiming));
  void* one = nullptr;
  void* three = nullptr;
  CUDA_REQUIRE(cudaMalloc(&one, kMiB));
  CUDA_REQUIRE(cudaMalloc(&three, 3 * kMiB));
  std::vector<char> host(4096, 1);

  nvtxRangePushA("cupti test range");
  CUDA_REQUIRE(cudaMemcpyAsync(one, host.data(), host.size(), cudaMemcpyHostToDevice, a));
  CUDA_REQUIRE(test::launch_spin_a(static_cast<int*>(one), kSpinCycles, 1, a));
  CUDA_REQUIRE(cudaEventRecord(a_done, a));
  CUDA_REQUIRE(cudaStreamWaitEvent(b, a_done, 0));
  CUDA_REQUIRE(test::launch_spin_b(static_cast<int*>(three), kSpinCycles, 2, b));
  CUDA_REQUIRE(cudaMemsetAsync(three, 0, 512, b));
  CUDA_REQUIRE(cudaStreamSynchronize(b));
  nvtxRangePop();
  CUDA_REQUIRE(cudaDeviceSynchronize());
  const uint32_t id_a = recorder->stream_id(a);
  const uint32_t id_b = recorder->stream_id(b);
  CUDA_REQUIRE(cudaFree(one));
  CUDA_REQUIRE(cudaFree(three));
  CUDA_REQUIRE(cudaEventDestroy(a_done));
  CUDA_REQUIRE(cudaStreamDestroy(a));
  CUDA_REQUIRE(cudaStreamDestroy(b));
  const int64_t t1 = profiler::host_now_ns();
  const profiler::Recording r = recorder->take();

  CHECK(id_a != id_b);
  const auto& ka = only<profiler::KernelRecord>(
      r.kernels, "kernel a", [](const auto& k) { return k.name == "cupti_test_spin_a"; });
  const auto& kb = only<profiler::KernelRecord>(
      r.kernels, "kernel b", [](const auto& k) { return k.name == "cupti_test_spin_b"; });
  CHECK(ka.stream == id_a);
  CHECK(kb.stream == id_b);
  CHECK(ka.block[0] == 32);
  CHECK(ka.grid[0] == 1);
  CHECK(ka.end_ns > ka.start_ns);
  CHECK(kb.start_ns >= ka.end_ns);  // b waited on an event recorded after a

  const auto& copy =
      only<profiler::CopyRecord>(r.copies, "copy", [](const auto& c) { return c.bytes == 4096; });
  CHECK(copy.kind == profiler::CopyKind::h2d);
  CHECK(copy.stream == id_a);
  CHECK(copy.end_ns <= ka.start_ns);  // same stream, issued before the kernel

  const auto& memset = only<profiler::MemsetRecord>(r.memsets, "memset",
                                                    [](const auto& m) { return m.bytes == 512; });
  CHECK(memset.stream == id_b);
  CHECK(memset.start_ns >= kb.end_ns);

  auto memory_at = [&](void* p, bool allocation) {
    std::vector<profiler::MemoryRecord> found;
    for (const profiler::MemoryRecord& m : r.memory)
      if (m.address == reinterpret_cast<uint64_t>(p) && m.allocation == allocation)
        found.push_back(m);
    return found;
  };
  for (auto [p, bytes] : {std::pair<void*, size_t>{one, kMiB}, {three, 3 * kMiB}}) {
    const auto allocs = memory_at(p, true), frees = memory_at(p, false);
    REQUIRE(allocs.size() == 1);
    REQUIRE(frees.size() == 1);
    CHECK(allocs[0].bytes == bytes);
    CHECK(frees[0].bytes == bytes);
    CHECK(frees[0].time_ns > allocs[0].time_ns);
  }
  CHECK(std::is_sorted(r.memory.begin(), r.memory.end(),
                       [](const auto& x, const auto& y) { return x.time_ns < y.time_ns; }));

  const auto& range = only<profiler::MarkerRecord>(
      r.markers, "nvtx range", [](const auto& m) { return m.name == "cupti test range"; });
  CHECK(range.start_ns <= ka.start_ns);
  CHECK(range.end_ns >= kb.end_ns);  // popped after cudaStreamSynchronize(b)

  bool stream_sync = false;
  for (const profiler::SyncRecord& s : r.syncs)
    stream_sync |= s.what == "cudaStreamSynchronize" && s.stream == id_b;
  CHECK(stream_sync);

  // Every timestamp on the host clock, inside the test's window.
  auto inside = [&](int64_t start, int64_t end) {
    return t0 <= start && start <= end && end <= t1;
  };
  CHECK(inside(ka.start_ns, ka.end_ns));
  CHECK(inside(kb.start_ns, kb.end_ns));
  CHECK(inside(copy.start_ns, copy.end_ns));
  CHECK(inside(memset.start_ns, memset.end_ns));
  CHECK(inside(range.start_ns, range.end_ns));
  for (const profiler::MemoryRecord& m : r.memory) CHECK(inside(m.time_ns, m.time_ns));

  CHECK(r.dropped_records == 0);
  CHECK(r.untimed_records == 0);
  CHECK(r.cupti_api_version / 10000 == 13);
  CHECK(r.clock == "host-monotonic (timestamp callback)");
  CHECK_FALSE(r.device_names.empty());
}

TEST_CASE("CUPTI: a second recorder while one records is refused", "[gpu][cupti]") {
  auto first = CuptiRecorder::start();
  CHECK_THROWS_AS(CuptiRecorder::start(), profiler::ProfilerError);
  CHECK_THROWS_WITH(CuptiRecorder::start(), Catch::Contains("another profiler"));
  first.reset();
  auto again = CuptiRecorder::start();  // the slot is free again
  CHECK(again != nullptr);
}

TEST_CASE("shardscope profile injects the recorder into a CUDA program", "[gpu][cupti][cli]") {
  test::TempDir dir;
  const std::string out = (dir.path / "sample.trace").string();
  // NVTX through the injection library (the first test pointed it at CUPTI directly).
  const std::string cmd = "env -u NVTX_INJECTION64_PATH " + std::string(SHARDSCOPE_CLI) +
                          " profile --out " + out +
                          " -- env -u RANK -u SLURM_PROCID -u OMPI_COMM_WORLD_RANK -u LOCAL_RANK " +
                          SHARDSCOPE_CUPTI_SAMPLE + " 2>&1";
  std::string output;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) output.append(buf.data(), n);
  const int raw = pclose(pipe);
  INFO(output);
  REQUIRE(WIFEXITED(raw));
  REQUIRE(WEXITSTATUS(raw) == 0);
  CHECK_THAT(output, Catch::Contains("profile: 1 process (ranks 0)"));

  const traces::Trace t = traces::load_trace(out);
  REQUIRE(t.ranks.size() == 1);
  const traces::RankTrace& r = t.ranks[0];
  CHECK(r.rank == 0);
  CHECK(r.device >= 0);
  int sample_kernels = 0, ranges = 0, memsets = 0;
  for (const traces::Event& e : r.events) {
    const std::string name(t.str(e.name));
    if (name == "sample_kernel") {
      ++sample_kernels;
      CHECK(e.category == traces::Category::compute);
      CHECK(r.lanes[e.lane].kind == traces::LaneKind::compute);
    }
    ranges += name == "sample_range";
    if (e.category == traces::Category::memset && e.bytes == (size_t{8} << 20)) ++memsets;
  }
  CHECK(sample_kernels == 4);
  CHECK(ranges == 2);
  CHECK(memsets == 1);
  REQUIRE(r.steps.size() == 2);  // from the ProfilerStep#N ranges
  CHECK(r.steps[0].number == 1);
  CHECK(r.steps[1].number == 2);
  bool eight_mib = false;
  for (const traces::MemoryEvent& m : r.memory) eight_mib |= m.bytes == int64_t{8} << 20;
  CHECK(eight_mib);
  CHECK(t.meta.tool_versions.at("cupti_dropped_records") == "0");
  CHECK_FALSE(t.meta.hardware.empty());
}
