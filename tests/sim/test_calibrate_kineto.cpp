// calibrate on a real PyTorch profiler trace: the kernels' FLOPs come from
// the Kineto importer (launching operator's record_shapes input dims,
// traces/op_cost.h), and so does their graph op type (linear, attention), so
// compute efficiency is fitted from a measured run into the model.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "../shared_traces.h"
#include "sim/calibrate.h"
#include "sim/hardware.h"
#include "traces/kineto_import.h"

using namespace shardscope;

TEST_CASE("calibrate fits compute from an imported profiler trace's FLOPs", "[calibrate][kineto]") {
  const std::string dir = test::kineto_traces_dir();
  if (dir.empty()) FAIL("the shared Kineto traces are not next to the checkout");
  // a100-sendrecv-rank0: A100, record_shapes; 377 kernels get FLOPs from
  // their aten::mm / addmm / bmm launchers (the rest have none).
  traces::KinetoImportSummary summary;
  const traces::Trace t = traces::import_kineto({dir + "/a100-sendrecv-rank0.json.gz"}, &summary);
  REQUIRE(summary.kernels_with_flops == 377);
  int64_t kernels = 0, with_flops = 0;
  for (const traces::Event& e : t.ranks.at(0).events) {
    if (e.category != traces::Category::compute) continue;
    ++kernels;
    with_flops += e.flops > 0;
  }
  CHECK(with_flops == 377);
  sim::CalibrationOptions options;
  options.base = sim::hardware_preset("a100-sxm");
  options.name = "a100-fit";
  options.group_size = 128;  // distributedInfo.world_size (SendRecv: not fitted)
  const sim::CalibrationResult r = sim::calibrate({{"a100.json.gz", &t}}, {}, options);
  CHECK(r.report.compute_events == kernels);
  CHECK(r.report.compute_without_flops == kernels - with_flops);
  int64_t used = 0, fitted_types = 0;
  for (const sim::EfficiencyReport& e : r.report.efficiency) {
    used += e.events + e.memory_bound + e.contended;
    fitted_types += e.fitted;
    if (e.fitted) {
      CHECK(e.efficiency > 0);
      CHECK(e.efficiency <= 1);
    }
  }
  // Every kernel with FLOPs is used (compute-bound, memory-bound or
  // contended) unless it started exactly at a collective boundary or in the
  // warm-up: before the second ProfilerStep.
  int64_t before_second_step = 0;
  const traces::RankTrace& rank = t.ranks.at(0);
  REQUIRE(rank.steps.size() >= 2);
  for (const traces::Event& e : rank.events)
    before_second_step += e.category == traces::Category::compute && e.flops > 0 && e.dur_ns > 0 &&
                          e.start_ns < rank.steps[1].start_ns;
  CHECK(before_second_step > 0);
  CHECK(r.report.compute_warmup == before_second_step);
  CHECK(used + r.report.compute_at_boundary + r.report.compute_warmup == with_flops);
  // The importer names each kernel with FLOPs by the graph op type its
  // launcher computes (aten::mm / addmm / bmm -> linear): one fit, written to
  // the model for the traces' dtype (no policy: fp32), by size when the
  // kernels span several FLOPs bins.
  CHECK(fitted_types == 1);
  const auto linear =
      std::find_if(r.report.efficiency.begin(), r.report.efficiency.end(),
                   [](const sim::EfficiencyReport& e) { return e.op_type == "linear"; });
  REQUIRE(linear != r.report.efficiency.end());
  CHECK(linear->fitted);
  CHECK(linear->written);
  CHECK(linear->dtype == plan::DType::f32);
  CHECK(r.hw.dtype_efficiency.at(plan::DType::f32).at("linear") == linear->efficiency);
  CHECK(linear->events + linear->memory_bound + linear->contended == used);
}
