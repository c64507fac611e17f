// The simulator on planned schedules of gpt2-tiny: closed forms, monotonicity
// in link bandwidth, determinism.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <iterator>

#include "plan/models.h"
#include "plan/schedule.h"
#include "sim/simulator.h"
#include "tests/plan/planned.h"
#include "tests/temp_dir.h"
#include "traces/trace_io.h"

using namespace shardscope;
using nlohmann::json;

namespace {

using test::Planned;

Planned plan_for(const json& doc, int64_t world) {
  return test::plan_model("gpt2-tiny", doc, world);
}

sim::SimResult simulate(const Planned& p, const sim::HardwareModel& hw) {
  return sim::simulate(p.graph, p.units, p.schedule, hw);
}

std::vector<json> policies() {
  const json block = {{"type", "class"}, {"classes", {"GPT2Block"}}};
  return {
      json::object(),
      {{"wrap", block}},
      {{"wrap", block}, {"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "bf16"}}}},
      {{"wrap", block}, {"reshard_after_forward", false}},
      {{"wrap", block}, {"activation_checkpointing", "full"}},
      {{"flavor", "fsdp1"}, {"wrap", block}},
      {{"shard_group_size", 1}},
  };
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("gpt2-tiny persistent bytes are 12 Psi/N with AdamW, 16 without set_to_none",
          "[sim][models]") {
  for (int64_t world : {2, 4, 8})
    for (const bool set_to_none : {true, false}) {
      Planned p = plan_for({{"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}},
                            {"zero_grad_set_to_none", set_to_none}},
                           world);
      sim::SimResult r = simulate(p, sim::hardware_preset("h100-sxm"));
      CHECK(r.fits);
      // Psi/N per rank = the shard elements of every unit (padding included):
      // fp32 parameters and Adam's two states, plus the fp32 gradients when
      // zero_grad keeps them.
      CHECK(r.persistent_bytes == (set_to_none ? 12 : 16) * p.units.total_shard_numel());
    }
}

TEST_CASE("DDP all-reduce time equals the ring closed form", "[sim][models]") {
  // shard_group_size = 1, world 8 on one node: every all-reduce of S bytes
  // takes C + 2 x 7 NVLink hops + 2 (S / B) (7/8), B the NVLink bus bandwidth.
  Planned p = plan_for({{"shard_group_size", 1}}, 8);
  // The analytical ring: the preset's published all-reduce fit (8 ranks,
  // one node, NVLS) is dropped. With it, every all-reduce costs the fit.
  sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  REQUIRE(hw.collective_fit(plan::OpKind::all_reduce, 8, false) != nullptr);
  hw.collectives.clear();
  sim::SimResult r = simulate(p, hw);
  int all_reduces = 0;
  for (size_t i = 0; i < p.schedule.ops.size(); ++i) {
    const plan::ScheduleOp& op = p.schedule.ops[i];
    if (op.kind != plan::OpKind::all_reduce) continue;
    ++all_reduces;
    const double seconds =
        2.0 * (static_cast<double>(op.bytes) / hw.nvlink_bus_bytes_per_s) * 7.0 / 8.0;
    const int64_t expected =
        hw.collective_latency_ns + 14 * hw.nvlink_latency_ns + std::llround(seconds * 1e9);
    CHECK((r.op_end[i] - r.op_start[i]).ns == expected);
  }
  CHECK(all_reduces > 0);
}

TEST_CASE("doubling link bandwidth never slows a step", "[sim][models]") {
  for (int64_t world : {8, 16}) {
    for (const json& doc : policies()) {
      Planned p = plan_for(doc, world);
      sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
      sim::HardwareModel fast = hw;
      fast.nvlink_bus_bytes_per_s *= 2;
      fast.ib_bytes_per_s *= 2;
      const sim::TimeNs slow_step = simulate(p, hw).step_time;
      const sim::TimeNs fast_step = simulate(p, fast).step_time;
      INFO("world " << world << " policy " << doc.dump());
      CHECK(fast_step <= slow_step);
      CHECK(slow_step > sim::TimeNs(0));
    }
  }
}

TEST_CASE("two runs give byte-identical traces and metrics", "[sim][models]") {
  Planned p = plan_for({{"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}}, 8);
  const sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  sim::SimResult a = simulate(p, hw);
  sim::SimResult b = simulate(p, hw);
  CHECK(a.trace == b.trace);
  CHECK(traces::metrics_to_json(a.metrics) == traces::metrics_to_json(b.metrics));
  test::TempDir dir;
  const std::string fa = (dir.path / "a.sstrace").string();
  const std::string fb = (dir.path / "b.sstrace").string();
  traces::save_trace(a.trace, fa);
  traces::save_trace(b.trace, fb);
  CHECK(read_bytes(fa) == read_bytes(fb));
  CHECK(!read_bytes(fa).empty());
}

TEST_CASE("the simulated trace is valid and says what it is", "[sim][models]") {
  Planned p = plan_for({{"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}}, 4);
  sim::SimResult r = simulate(p, sim::hardware_preset("h100-sxm"));
  traces::validate(r.trace);
  CHECK(r.trace.meta.source == traces::Source::simulator);
  CHECK(r.metrics.source == traces::Source::simulator);
  REQUIRE(r.trace.ranks.size() == 1);
  const traces::RankTrace& rank = r.trace.ranks[0];
  CHECK(rank.represents == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(rank.steps.size() == 1);
  CHECK(rank.events.size() >= p.schedule.ops.size());
  CHECK(!rank.flows.empty());
  CHECK(r.metrics.total.step_time_ms == Approx(r.step_time.ms()));
  CHECK(r.metrics.total.peak_allocated_bytes == r.peak_allocated_bytes);
  int64_t breakdown = 0;
  for (const auto& [k, v] : r.peak.by_category) breakdown += v;
  CHECK(breakdown == r.peak_allocated_bytes);
  int64_t by_unit = 0;
  for (const auto& [k, v] : r.peak.by_unit) by_unit += v;
  CHECK(by_unit == r.peak_allocated_bytes);
}
