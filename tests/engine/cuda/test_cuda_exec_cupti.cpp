// --profile: CUPTI records what the GPU did during the steps. The allocator's
// own segments, as MEMORY2 sees them (cudaMalloc/cudaFree of the addresses
// CudaBacking handed out), peak at exactly the caching allocator's peak
// reserved bytes; everything else (the executor's workspaces, cuBLAS
// workspaces, NCCL) is reported apart as other device memory; the trace's
// kernels carry the schedule's op names on the schedule's lanes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/cuda/exec/cuda_train.h"
#include "tests/engine/cuda/test_cuda_exec_util.h"

using namespace shardscope;

TEST_CASE("cupti: allocator segments in MEMORY2 peak at the allocator's reserved peak",
          "[cuda][exec][cupti]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  engine::cuda::CudaTrainConfig config;
  config.base.graph = &g;
  config.base.policy = test::make_policy(
      {"batch_size=2", "seq_len=16", "wrap.type=class", "wrap.classes=[\"GPT2Block\"]"});
  config.base.world_size = 1;
  config.base.steps = 2;
  config.profile = true;
  test::NcclWorldOne nccl(engine::exec::comm_groups(g, config.base.policy, 1));
  const engine::cuda::CudaRankRun run = engine::cuda::train_cuda_rank(config, nccl.comm, {});

  CHECK(run.cupti_dropped_records == 0);
  REQUIRE_FALSE(run.allocator_segments.empty());
  std::set<std::pair<uint64_t, uint64_t>> segments;
  for (const auto& s : run.allocator_segments) segments.emplace(s.base, s.bytes);

  // Replay the MEMORY2 records of the allocator's segments.
  int64_t current = 0, peak = 0;
  size_t seen = 0;
  std::map<uint64_t, uint64_t> live;  // address -> bytes
  for (const profiler::MemoryRecord& r : run.cupti_memory) {
    if (r.allocation && segments.count({r.address, r.bytes})) {
      live[r.address] = r.bytes;
      current += static_cast<int64_t>(r.bytes);
      peak = std::max(peak, current);
      ++seen;
    } else if (!r.allocation && live.count(r.address)) {
      current -= static_cast<int64_t>(live[r.address]);
      live.erase(r.address);
    }
  }
  CHECK(seen == run.allocator_segments.size());
  CHECK(peak == run.peak_reserved_bytes);
  CHECK(run.peak_reserved_bytes >= run.run.peak_allocated_bytes);

  // Other memory: at least the executor's own workspaces (allocated after the
  // recorder started), reported apart from the allocator.
  CHECK(run.executor_device_bytes > 0);
  CHECK(run.other_device_bytes >= run.executor_device_bytes);
  CHECK(run.other_device_bytes ==
        engine::cuda::peak_other_device_bytes(run.cupti_memory, run.allocator_segments));

  // Kernels mapped to ops: a forward op's kernel on the compute lane.
  const traces::Trace& t = run.run.trace;
  const traces::RankTrace& r = t.ranks.at(0);
  bool forward_on_compute = false;
  for (const traces::Event& e : r.events) {
    const std::string name(t.str(e.name));
    const std::string lane(t.str(r.lanes.at(e.lane).name));
    if (lane == "compute" && name.size() > 8 && name.compare(name.size() - 8, 8, ".forward") == 0)
      forward_on_compute = true;
  }
  CHECK(forward_on_compute);
  CHECK(r.steps.size() == 2);
  // The trace's memory records are the allocator's (host side): their running
  // allocated bytes peak at the executor's peak allocated.
  int64_t trace_peak = 0;
  for (const traces::MemoryEvent& m : r.memory) trace_peak = std::max(trace_peak, m.allocated);
  CHECK(trace_peak == run.run.peak_allocated_bytes);
}
