// Kernels -> PyTorch ops from NVTX ranges (profiler/cupti/torch_ops.h), over
// synthetic decoded records: threads, nesting, backward nodes, recompute,
// launches outside any range, CUDA graph replays, the longest kernel of an
// op, and what append_recording and the merge make of it.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "profiler/cupti/process_trace.h"
#include "profiler/cupti/torch_ops.h"

using namespace shardscope;
using profiler::KernelRecord;
using profiler::LaunchRecord;
using profiler::MarkerRecord;
using profiler::Recording;

namespace {

constexpr const char* kBf16Gemm = "ampere_bf16_s16816gemm_bf16_64x64_ldg8_f2f_tn";

void range(Recording& rec, uint32_t thread, int64_t start, int64_t end, const std::string& name) {
  MarkerRecord m;
  m.start_ns = start;
  m.end_ns = end;
  m.name = name;
  m.thread = thread;
  rec.markers.push_back(m);
}

// A kernel [start, start + dur) launched by an API call at `launch` on `thread`.
void kernel(Recording& rec, uint32_t correlation, uint32_t thread, int64_t launch, int64_t start,
            int64_t dur, const std::string& name = kBf16Gemm) {
  KernelRecord k;
  k.correlation = correlation;
  k.start_ns = start;
  k.end_ns = start + dur;
  k.name = name;
  k.stream = 7;
  rec.kernels.push_back(k);
  rec.launches.push_back(LaunchRecord{launch, correlation, thread});
}

// Thread 1: the forward pass inside a program's own range "train step"
// (not PyTorch's); thread 2: autograd's backward thread.
Recording training_records() {
  Recording rec;
  range(rec, 1, 0, 5000, "train step");
  range(rec, 1, 100, 200, "aten::linear, seq = 4, op_id = 10, sizes = [[8, 16], [32, 16], [32]]");
  range(rec, 1, 110, 115, "aten::t, op_id = 11, sizes = [[32, 16]]");
  range(rec, 1, 120, 180,
        "aten::addmm, seq = 4, op_id = 12, sizes = [[32], [8, 16], [16, 32], [], []]");
  kernel(rec, 1, 1, 150, 1000, 100);  // 0: addmm's GEMM (forward)
  range(rec, 2, 300, 500, "MmBackward0, seq = 4, op_id = 50, sizes = [[8, 32]]");
  range(rec, 2, 310, 350, "aten::mm, op_id = 51, sizes = [[8, 32], [32, 16]]");
  kernel(rec, 2, 2, 320, 1200, 80);  // 1: grad input (backward)
  range(rec, 2, 360, 400, "aten::mm, op_id = 52, sizes = [[32, 8], [8, 16]]");
  kernel(rec, 3, 2, 370, 1300, 80);  // 2: grad weight (backward)
  // Activation checkpointing: a forward op recomputed inside a backward node.
  range(rec, 2, 410, 450, "aten::mm, seq = 9, op_id = 53, sizes = [[4, 4], [4, 4]]");
  kernel(rec, 4, 2, 420, 1400, 10);  // 3: recompute (forward)
  kernel(rec, 5, 3, 150, 1500, 10);  // 4: thread 3 has no ranges: outside
  kernel(rec, 6, 1, 250, 1600, 10);  // 5: inside "train step" only: outside
  // Two kernels of one op: the FLOPs go on the longer.
  range(rec, 1, 600, 700, "aten::mm, seq = 5, op_id = 60, sizes = [[2, 3], [3, 4]]");
  kernel(rec, 7, 1, 610, 1700, 10);  // 6: the shorter
  kernel(rec, 8, 1, 620, 1800, 50);  // 7: the longer
  range(rec, 1, 800, 900, "aten::mm, seq = 3, op_id = 70");
  kernel(rec, 9, 1, 810, 1900, 10);  // 8: a range without sizes
  range(rec, 1, 1000, 1100, "aten::add, seq = 2, op_id = 80, sizes = [[8], [8], []]");
  kernel(rec, 10, 1, 1010, 2000, 10, "vectorized_elementwise_kernel");  // 9: no FLOPs formula
  range(rec, 1, 1200, 1300, "aten::mm, op_id = 90, sizes = [[2, 3], [3");
  kernel(rec, 11, 1, 1210, 2100, 10);  // 10: a malformed (truncated) range
  // A CUDA graph replayed inside an op range: its kernels share the
  // cudaGraphLaunch's correlation id and were captured under other ops.
  range(rec, 1, 1400, 1500, "aten::mm, seq = 6, op_id = 95, sizes = [[2, 3], [3, 4]]");
  kernel(rec, 12, 1, 1410, 2200, 10);  // 11
  kernel(rec, 12, 1, 1410, 2300, 10);  // 12
  rec.kernels[11].graph_id = rec.kernels[12].graph_id = 3;
  KernelRecord lost;  // 13: no launch record
  lost.correlation = 99;
  lost.name = kBf16Gemm;
  lost.start_ns = 2400;
  lost.end_ns = 2410;
  rec.kernels.push_back(lost);
  range(rec, 1, 1600, 1700, "aten::mm, seq = 7, op_id = 96, sizes = [[2, 3], [3, 4]]");
  kernel(rec, 13, 1, 1610, 2500, 10, "nvjet_tst_64x8_64x16_4x1_v_bz_TNN");  // 14: unknown dtype
  KernelRecord nccl;  // 15: not a compute kernel: not counted
  nccl.name = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
  nccl.correlation = 14;
  rec.kernels.push_back(nccl);
  return rec;
}

}  // namespace

TEST_CASE("torch ops: each kernel gets the op type and FLOPs of its innermost op range",
          "[profiler][nvtx]") {
  const Recording rec = training_records();
  profiler::TorchOpSummary s;
  const std::vector<profiler::KernelOpCost> c = profiler::torch_op_costs(rec, &s);
  REQUIRE(c.size() == rec.kernels.size());
  // addmm [8,16] x [16,32]: 2 * 8 * 32 * 16 FLOPs; bytes in bf16: bias 32,
  // mat1 128, mat2 512 elements read, 256 written, 2 bytes each.
  REQUIRE(c[0].set);
  CHECK(c[0].op_type == "linear");
  CHECK(c[0].op_name == "aten::addmm");
  CHECK(c[0].flops == 8192);
  CHECK(c[0].bytes == 2 * (32 + 128 + 512 + 256));
  CHECK(c[0].dtype == traces::KernelDtype::bf16);
  // Inside MmBackward0, on autograd's thread: backward.
  REQUIRE(c[1].set);
  CHECK(c[1].op_type == "linear.backward");
  CHECK(c[1].flops == 2 * 8 * 16 * 32);
  REQUIRE(c[2].set);
  CHECK(c[2].op_type == "linear.backward");
  CHECK(c[2].flops == 2 * 32 * 16 * 8);
  // Recomputed inside a backward node, but with its own seq: forward work.
  REQUIRE(c[3].set);
  CHECK(c[3].op_type == "linear");
  CHECK(c[3].flops == 2 * 4 * 4 * 4);
  CHECK_FALSE(c[4].set);
  CHECK_FALSE(c[5].set);
  CHECK_FALSE(c[6].set);
  REQUIRE(c[7].set);
  CHECK(c[7].flops == 2 * 2 * 4 * 3);
  for (size_t i : {8, 9, 10, 11, 12, 13, 15}) CHECK_FALSE(c[i].set);
  // A name that states no dtype: FLOPs, no bytes, dtype unknown.
  REQUIRE(c[14].set);
  CHECK(c[14].flops == 48);
  CHECK(c[14].bytes == 0);
  CHECK(c[14].dtype == traces::KernelDtype::unknown);

  CHECK(s.kernels == 15);
  CHECK(s.with_flops == 6);
  CHECK(s.outside_op_range == 2);
  CHECK(s.flops_on_other_kernel == 1);
  CHECK(s.range_without_sizes == 1);
  CHECK(s.op_not_costed == 1);
  CHECK(s.range_malformed == 1);
  CHECK(s.graph_replay == 2);
  CHECK(s.no_launch_record == 1);
  CHECK(s.with_flops + s.outside_op_range + s.flops_on_other_kernel + s.range_without_sizes +
            s.op_not_costed + s.range_malformed + s.graph_replay + s.no_launch_record ==
        s.kernels);
  CHECK(s.dtypes == std::map<std::string, int64_t>{{"bf16", 5}, {"unknown", 1}});
}

TEST_CASE("torch ops: ranges are matched on the launching thread, not by time alone",
          "[profiler][nvtx]") {
  Recording rec;
  range(rec, 1, 100, 200, "aten::mm, seq = 1, op_id = 1, sizes = [[2, 3], [3, 4]]");
  range(rec, 2, 100, 200, "aten::bmm, seq = 2, op_id = 2, sizes = [[5, 2, 3], [5, 3, 4]]");
  kernel(rec, 1, 2, 150, 1000, 10);
  kernel(rec, 2, 1, 150, 1100, 10);
  const auto c = profiler::torch_op_costs(rec);
  CHECK(c[0].op_name == "aten::bmm");
  CHECK(c[0].flops == 5 * 2 * 2 * 4 * 3);
  CHECK(c[1].op_name == "aten::mm");
  CHECK(c[1].flops == 2 * 2 * 4 * 3);
}

TEST_CASE("torch ops: append_recording puts them on the kernel events, the merge sums the counts",
          "[profiler][nvtx]") {
  const Recording rec = training_records();
  profiler::ProcessIdentity id;
  id.pid = 10;
  const traces::Trace a = profiler::process_trace(rec, id);
  uint64_t flops = 0;
  int linear = 0, backward = 0;
  for (const traces::Event& e : a.ranks[0].events) {
    flops += e.flops;
    if (e.op != traces::kNoString && a.str(e.op) == "linear") ++linear;
    if (e.op != traces::kNoString && a.str(e.op) == "linear.backward") ++backward;
  }
  CHECK(flops == 3 * 8192 + 128 + 48 + 48);
  CHECK(linear == 4);
  CHECK(backward == 2);
  CHECK(a.meta.tool_versions.at("torch_nvtx.kernels") == "15");
  CHECK(a.meta.tool_versions.at("torch_nvtx.dtype.bf16") == "5");

  // Without launch records (no --torch-shapes): nothing attributed, no counts.
  Recording plain = rec;
  plain.launches.clear();
  const traces::Trace p = profiler::process_trace(plain, id);
  for (const traces::Event& e : p.ranks[0].events) CHECK(e.flops == 0);
  CHECK(p.meta.tool_versions.count("torch_nvtx.kernels") == 0);

  id.pid = 11;
  id.rank = 1;
  std::vector<profiler::ProcessTraceFile> files;
  files.push_back({"10.trace", a});
  files.push_back({"11.trace", profiler::process_trace(rec, id)});
  const profiler::MergedProfile m = profiler::merge_process_traces(std::move(files));
  CHECK(m.trace.meta.tool_versions.at("torch_nvtx.kernels") == "30");
  CHECK(m.trace.meta.tool_versions.at("torch_nvtx.with_flops") == "12");
  CHECK(m.trace.meta.tool_versions.at("torch_nvtx.dtype.unknown") == "2");
}
