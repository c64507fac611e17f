// append_recording: hand-made CUPTI records -> lanes, categories, bytes, memory
// counters and metadata, and the metrics of the result in closed form.
#include <catch2/catch.hpp>

#include "profiler/cupti/cupti_recorder.h"
#include "traces/kernel_names.h"
#include "traces/metrics.h"

using namespace shardscope;
using profiler::CopyKind;
using profiler::Recording;
using traces::Category;
using traces::LaneKind;

namespace {

constexpr uint64_t kMiB = 1 << 20;
const char* kAllGather = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)";

profiler::KernelRecord kernel(const std::string& name, uint32_t stream, int64_t start, int64_t end,
                              uint32_t correlation, uint32_t device = 0) {
  profiler::KernelRecord k;
  k.name = name;
  k.stream = stream;
  k.start_ns = start;
  k.end_ns = end;
  k.correlation = correlation;
  k.device = device;
  return k;
}

profiler::MemoryRecord memory(int64_t t, uint64_t address, uint64_t bytes, bool allocation) {
  profiler::MemoryRecord m;
  m.time_ns = t;
  m.address = address;
  m.bytes = bytes;
  m.allocation = allocation;
  return m;
}

// Compute kernel [1000, 1100) on stream 7, NCCL all-gather [1050, 1150) on
// stream 13, a 4096 B HtoD copy [900, 950) and a 512 B memset [1200, 1210) on
// stream 7, cudaMalloc 1 MiB / 3 MiB and a free of the first, an NVTX range
// [850, 1250), a stream sync [1150, 1160) and a device sync [1250, 1260).
Recording sample_recording() {
  Recording r;
  r.kernels.push_back(kernel("gemm_kernel", 7, 1000, 1100, 11));
  r.kernels.push_back(kernel(kAllGather, 13, 1050, 1150, 12));
  profiler::CopyRecord c;
  c.start_ns = 900;
  c.end_ns = 950;
  c.stream = 7;
  c.bytes = 4096;
  c.kind = CopyKind::h2d;
  c.correlation = 10;
  r.copies.push_back(c);
  profiler::MemsetRecord s;
  s.start_ns = 1200;
  s.end_ns = 1210;
  s.stream = 7;
  s.bytes = 512;
  r.memsets.push_back(s);
  r.memory.push_back(memory(800, 0x1000, kMiB, true));
  r.memory.push_back(memory(850, 0x200000, 3 * kMiB, true));
  r.memory.push_back(memory(1300, 0x1000, kMiB, false));
  r.markers.push_back(profiler::MarkerRecord{850, 1250, "forward", ""});
  r.syncs.push_back(profiler::SyncRecord{1150, 1160, 7, "cudaStreamSynchronize"});
  r.syncs.push_back(profiler::SyncRecord{1250, 1260, 0xffffffffu, "cudaDeviceSynchronize"});
  r.dropped_records = 3;
  r.cupti_api_version = 130001;
  r.device_names[0] = "NVIDIA H100 80GB HBM3";
  return r;
}

const traces::Event& only_event(const traces::Trace& t, const traces::RankTrace& r,
                                const std::string& name) {
  const traces::Event* found = nullptr;
  for (const traces::Event& e : r.events)
    if (t.str(e.name) == name) {
      REQUIRE(found == nullptr);
      found = &e;
    }
  REQUIRE(found != nullptr);
  return *found;
}

std::string lane_name(const traces::Trace& t, const traces::RankTrace& r, const traces::Event& e) {
  return std::string(t.str(r.lanes[e.lane].name));
}

}  // namespace

TEST_CASE("kernel names: NCCL collectives by name, demangled or mangled, others compute",
          "[profiler][kernel_names]") {
  CHECK(traces::kernel_category(kAllGather) == Category::comm_all_gather);
  CHECK(traces::kernel_category("ncclKernel_ReduceScatter_RING_LL_Sum_float") ==
        Category::comm_reduce_scatter);
  CHECK(traces::kernel_category("ncclDevKernel_AllReduce_Sum_f32_RING_LL") ==
        Category::comm_all_reduce);
  CHECK(traces::kernel_category("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") ==
        Category::comm_other);
  CHECK(traces::kernel_category("_Z31ncclDevKernel_AllGather_RING_LL24ncclDevKernelArgsStorage") ==
        Category::comm_all_gather);
  CHECK(traces::kernel_category("void at::native::vectorized_elementwise_kernel<4>") ==
        Category::compute);
  CHECK(traces::kernel_category("my_nccl_AllGather_lookalike") == Category::compute);
  CHECK_FALSE(traces::is_nccl_kernel("_Z3fooi"));
  int64_t n = 0;
  CHECK(traces::parse_profiler_step("ProfilerStep#12", &n));
  CHECK(n == 12);
  CHECK_FALSE(traces::parse_profiler_step("ProfilerStep#", &n));
  CHECK_FALSE(traces::parse_profiler_step("ProfilerStep#1a", &n));
  CHECK_FALSE(traces::parse_profiler_step("step 3", &n));
}

TEST_CASE("append_recording: lanes, categories, bytes and syncs of hand-made records",
          "[profiler][append_recording]") {
  traces::Trace t;
  traces::RankTrace& r = t.add_rank(0);
  profiler::append_recording(sample_recording(), profiler::TraceMapping{}, t, r);
  traces::validate(t);
  REQUIRE(r.events.size() == 7);
  CHECK(r.device == 0);

  const traces::Event& gemm = only_event(t, r, "gemm_kernel");
  CHECK(gemm.category == Category::compute);
  CHECK(gemm.start_ns == 1000);
  CHECK(gemm.dur_ns == 100);
  CHECK(gemm.correlation == 11);
  CHECK(lane_name(t, r, gemm) == "stream 7");
  CHECK(r.lanes[gemm.lane].kind == LaneKind::compute);
  CHECK(r.lanes[gemm.lane].stream == 7);

  const traces::Event& ag = only_event(t, r, kAllGather);
  CHECK(ag.category == Category::comm_all_gather);
  CHECK(lane_name(t, r, ag) == "stream 13");
  CHECK(r.lanes[ag.lane].kind == LaneKind::comm);

  const traces::Event& copy = only_event(t, r, "Memcpy HtoD");
  CHECK(copy.category == Category::memcpy_h2d);
  CHECK(copy.bytes == 4096);
  CHECK(copy.dur_ns == 50);
  CHECK(copy.lane == gemm.lane);

  const traces::Event& memset = only_event(t, r, "Memset");
  CHECK(memset.category == Category::memset);
  CHECK(memset.bytes == 512);

  const traces::Event& marker = only_event(t, r, "forward");
  CHECK(marker.category == Category::marker);
  CHECK(lane_name(t, r, marker) == "nvtx");
  CHECK(r.lanes[marker.lane].kind == LaneKind::host);

  const traces::Event& stream_sync = only_event(t, r, "cudaStreamSynchronize");
  CHECK(stream_sync.category == Category::sync);
  CHECK(stream_sync.lane == gemm.lane);
  const traces::Event& device_sync = only_event(t, r, "cudaDeviceSynchronize");
  CHECK(device_sync.category == Category::sync);
  CHECK(lane_name(t, r, device_sync) == "host");
  CHECK(r.lanes[device_sync.lane].kind == LaneKind::host);
  CHECK(r.steps.empty());  // no ProfilerStep#N range
}

TEST_CASE("append_recording: memory counters and metadata", "[profiler][append_recording]") {
  traces::Trace t;
  traces::RankTrace& r = t.add_rank(0);
  profiler::append_recording(sample_recording(), profiler::TraceMapping{}, t, r);
  REQUIRE(r.memory.size() == 3);
  CHECK(r.memory[0].bytes == int64_t(kMiB));
  CHECK(r.memory[0].allocated == int64_t(kMiB));
  CHECK(r.memory[1].bytes == int64_t(3 * kMiB));
  CHECK(r.memory[1].allocated == int64_t(4 * kMiB));
  CHECK(r.memory[2].bytes == -int64_t(kMiB));
  CHECK(r.memory[2].allocated == int64_t(3 * kMiB));
  CHECK(r.memory[2].address == 0x1000);
  for (const traces::MemoryEvent& m : r.memory) {
    CHECK(m.reserved == m.allocated);  // cudaMalloc-level records: reserved = allocated
    CHECK(m.category == traces::MemoryCategory::other);
  }
  CHECK(t.meta.tool_versions.at("cupti_dropped_records") == "3");
  CHECK(t.meta.tool_versions.at("cupti") == "13.0.1 (API 130001)");
  CHECK(t.meta.hardware == "NVIDIA H100 80GB HBM3");

  // A second recording continues the counters and adds to the dropped count.
  Recording more;
  more.memory.push_back(memory(2000, 0x200000, 3 * kMiB, false));
  more.dropped_records = 2;
  profiler::append_recording(more, profiler::TraceMapping{}, t, r);
  REQUIRE(r.memory.size() == 4);
  CHECK(r.memory[3].allocated == 0);
  CHECK(r.memory[3].reserved == 0);
  CHECK(t.meta.tool_versions.at("cupti_dropped_records") == "5");

  // Records earlier than the rank's last memory record cannot be appended in order.
  Recording late;
  late.memory.push_back(memory(1500, 0x9000, 64, true));
  CHECK_THROWS_WITH(profiler::append_recording(late, profiler::TraceMapping{}, t, r),
                    Catch::Contains("already has memory records"));
}

TEST_CASE("append_recording: stream-ordered (cudaMallocAsync) blocks move allocated, not reserved",
          "[profiler][append_recording]") {
  traces::Trace t;
  traces::RankTrace& r = t.add_rank(0);
  Recording rec;
  rec.memory.push_back(memory(100, 0x100000, 4 * kMiB, true));  // cudaMalloc: a segment
  profiler::MemoryRecord a = memory(200, 0x900000, kMiB, true);
  a.is_async = true;
  rec.memory.push_back(a);
  profiler::MemoryRecord f = memory(300, 0x900000, kMiB, false);
  f.is_async = true;
  rec.memory.push_back(f);
  profiler::append_recording(rec, profiler::TraceMapping{}, t, r);
  REQUIRE(r.memory.size() == 3);
  CHECK(r.memory[0].allocated == int64_t(4 * kMiB));
  CHECK(r.memory[0].reserved == int64_t(4 * kMiB));
  CHECK(r.memory[1].allocated == int64_t(5 * kMiB));
  CHECK(r.memory[1].reserved == int64_t(4 * kMiB));  // the pool's reservation is not seen
  CHECK(r.memory[2].allocated == int64_t(4 * kMiB));
  CHECK(r.memory[2].reserved == int64_t(4 * kMiB));
}

TEST_CASE("append_recording: metrics of the result in closed form",
          "[profiler][append_recording]") {
  traces::Trace t;
  traces::RankTrace& r = t.add_rank(0);
  profiler::append_recording(sample_recording(), profiler::TraceMapping{}, t, r);
  const traces::Metrics m = traces::compute_metrics(t);
  REQUIRE(m.ranks.size() == 1);
  const traces::MetricValues& v = m.total;
  // COMP = [1000, 1100), COMM = [1050, 1150): overlap 50 / 100, exposed [1100, 1150).
  CHECK(v.compute_ms == Approx(100e-6));
  CHECK(v.comm_ms == Approx(100e-6));
  CHECK(v.overlap == Approx(0.5));
  CHECK(v.exposed_comm_ms == Approx(50e-6));
  // Step: first start 850 (the NVTX range) to last end 1260 (the device sync).
  CHECK(v.step_time_ms == Approx(410e-6));
  // Busy device lanes: copy [900, 950) + kernels [1000, 1150) + memset [1200, 1210) = 210 ns
  // over the device span [900, 1210) = 310 ns; markers and syncs are never busy.
  CHECK(v.device_span_ms == Approx(310e-6));
  CHECK(v.idle_ms == Approx(100e-6));
  CHECK(v.peak_allocated_bytes == int64_t(4 * kMiB));
  CHECK(v.peak_reserved_bytes == int64_t(4 * kMiB));
}

TEST_CASE("append_recording: mapping names streams, ops and memory categories",
          "[profiler][append_recording]") {
  Recording rec = sample_recording();
  rec.kernels[0].external_id = 5;
  profiler::TraceMapping mapping;
  mapping.streams[7] = {"compute", LaneKind::compute};
  mapping.streams[13] = {"comm", LaneKind::comm};
  mapping.op_for = [](uint64_t id, std::string* name, std::string* unit, std::string* op) {
    if (id != 5) return false;
    *name = "h.0.mlp.fc1 fwd";
    *unit = "h.0";
    *op = "matmul";
    return true;
  };
  mapping.memory_category = [](uint64_t address) {
    return address == 0x1000 ? traces::MemoryCategory::parameters
                             : traces::MemoryCategory::activations;
  };
  traces::Trace t;
  traces::RankTrace& r = t.add_rank(2);
  profiler::append_recording(rec, mapping, t, r);
  const traces::Event& op = only_event(t, r, "h.0.mlp.fc1 fwd");
  CHECK(op.category == Category::compute);
  CHECK(t.str(op.unit) == "h.0");
  CHECK(t.str(op.op) == "matmul");
  CHECK(lane_name(t, r, op) == "compute");
  CHECK(r.lanes[op.lane].stream == 7);
  CHECK(lane_name(t, r, only_event(t, r, kAllGather)) == "comm");
  REQUIRE(r.memory.size() == 3);
  CHECK(r.memory[0].category == traces::MemoryCategory::parameters);
  CHECK(r.memory[1].category == traces::MemoryCategory::activations);
  CHECK(r.memory[2].category == traces::MemoryCategory::parameters);
}

TEST_CASE("append_recording: ProfilerStep#N ranges become steps when the rank has none",
          "[profiler][append_recording]") {
  Recording rec;
  rec.kernels.push_back(kernel("k", 7, 150, 250, 1));
  rec.kernels.push_back(kernel("k", 7, 1150, 1300, 2));
  rec.markers.push_back(profiler::MarkerRecord{1000, 1900, "ProfilerStep#2", ""});
  rec.markers.push_back(profiler::MarkerRecord{100, 900, "ProfilerStep#1", ""});
  rec.markers.push_back(profiler::MarkerRecord{120, 130, "ncclAllGather", "NCCL"});
  traces::Trace t;
  traces::RankTrace& r = t.add_rank(0);
  profiler::append_recording(rec, profiler::TraceMapping{}, t, r);
  REQUIRE(r.steps.size() == 2);
  CHECK(r.steps[0].number == 1);
  CHECK(r.steps[0].start_ns == 100);
  CHECK(r.steps[0].end_ns == 900);
  CHECK(r.steps[1].number == 2);
  CHECK(r.steps[1].start_ns == 1000);
  CHECK(lane_name(t, r, only_event(t, r, "ncclAllGather")) == "nvtx NCCL");
  const traces::Metrics m = traces::compute_metrics(t);
  CHECK(m.ranks.at(0).steps == 2);

  // A rank that has steps keeps them.
  traces::Trace t2;
  traces::RankTrace& r2 = t2.add_rank(0);
  r2.steps.push_back(traces::Step{7, 0, 5000});
  profiler::append_recording(rec, profiler::TraceMapping{}, t2, r2);
  REQUIRE(r2.steps.size() == 1);
  CHECK(r2.steps[0].number == 7);
}

TEST_CASE("append_recording: several devices get per-device lanes, syncs go to the host lane",
          "[profiler][append_recording]") {
  Recording rec;
  rec.kernels.push_back(kernel("k0", 7, 0, 10, 1, /*device=*/0));
  rec.kernels.push_back(kernel("k1", 7, 0, 10, 2, /*device=*/1));
  rec.kernels.push_back(kernel("k1b", 7, 20, 30, 3, /*device=*/1));
  rec.syncs.push_back(profiler::SyncRecord{40, 50, 7, "cudaStreamSynchronize"});
  traces::Trace t;
  traces::RankTrace& r = t.add_rank(0);
  profiler::append_recording(rec, profiler::TraceMapping{}, t, r);
  CHECK(lane_name(t, r, only_event(t, r, "k0")) == "gpu 0 stream 7");
  CHECK(lane_name(t, r, only_event(t, r, "k1")) == "gpu 1 stream 7");
  CHECK(lane_name(t, r, only_event(t, r, "cudaStreamSynchronize")) == "host");
  CHECK(r.device == 1);  // most events ran there
}
