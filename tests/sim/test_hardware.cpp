// Hardware presets, strict JSON and the collective closed forms.
#include <catch2/catch.hpp>

#include "sim/cost_model.h"
#include "sim/hardware.h"
#include "tests/plan/toy_graph.h"
#include "tests/sim/sim_fixtures.h"

using namespace shardscope;
using nlohmann::json;

TEST_CASE("every preset validates and round-trips through JSON", "[sim][hw]") {
  for (const std::string& name : sim::hardware_presets()) {
    sim::HardwareModel h = sim::hardware_preset(name);
    h.validate();
    json doc = sim::hardware_to_json(h);
    doc["base"] = name;
    sim::HardwareModel back = sim::hardware_from_json(doc, "x");
    CHECK(sim::hardware_to_json(back) == sim::hardware_to_json(h));
  }
  CHECK(sim::hardware_preset("h100-sxm").peak_flops(plan::DType::bf16) == 989e12);
  CHECK(sim::hardware_preset("h200-sxm").hbm_bytes_per_s == 4.8e12);
  CHECK(sim::hardware_preset("a100-sxm").peak_flops_bf16 == 312e12);
  CHECK(sim::hardware_preset("h100-sxm").ib_bytes_per_s == 50e9);  // 400 Gb/s
  CHECK_THROWS_AS(sim::hardware_preset("tpu-v9"), sim::Error);
}

TEST_CASE("a hardware JSON overrides the fields it names over its base", "[sim][hw]") {
  sim::HardwareModel h = sim::hardware_from_json(
      json{{"base", "a100-sxm"}, {"hbm_bytes_per_s", 1e12}, {"efficiency", {{"linear", 0.9}}}},
      "mine.json");
  CHECK(h.hbm_bytes_per_s == 1e12);
  CHECK(h.peak_flops_bf16 == 312e12);
  CHECK(h.efficiency_of("linear") == 0.9);
  CHECK(h.efficiency_of("attention") == 0.5);
  CHECK(h.efficiency_of("no_such_op") == 0.6);
}

TEST_CASE("an unknown hardware key is an error naming it", "[sim][hw]") {
  try {
    sim::hardware_from_json(json{{"hbm_bandwidth", 1e12}}, "bad.json");
    FAIL("no error");
  } catch (const sim::Error& e) {
    CHECK(std::string(e.what()).find("'hbm_bandwidth'") != std::string::npos);
  }
  CHECK_THROWS_AS(sim::hardware_from_json(json{{"contention_factor", 0.5}}), sim::Error);
  CHECK_THROWS_AS(sim::hardware_from_json(json{{"memory_bytes", "lots"}}), sim::Error);
}

TEST_CASE("ring collective times follow the nccl-tests bus-bandwidth formulas", "[sim][hw]") {
  // B = 1e9 B/s, latency 100 ns, S = 8000 B, n = 8:
  //   all-gather / reduce-scatter: 100 + 8000 x 7/8 = 7100 ns; all-reduce: 100 + 14000 ns.
  sim::LinkModel link{1e9, sim::TimeNs(100), false};
  CHECK(sim::collective_time(plan::OpKind::all_gather, 8000, 8, link) == sim::TimeNs(7100));
  CHECK(sim::collective_time(plan::OpKind::reduce_scatter, 8000, 8, link) == sim::TimeNs(7100));
  CHECK(sim::collective_time(plan::OpKind::all_reduce, 8000, 8, link) == sim::TimeNs(14100));
  CHECK(sim::collective_time(plan::OpKind::all_reduce, 8000, 1, link) == sim::TimeNs(0));
}

TEST_CASE("durations round to the nearest nanosecond", "[sim][time]") {
  CHECK(sim::TimeNs::from_seconds(1.4e-9) == sim::TimeNs(1));
  CHECK(sim::TimeNs::from_seconds(1.6e-9) == sim::TimeNs(2));
  CHECK(sim::TimeNs::from_seconds(-1.0) == sim::TimeNs(0));
  CHECK(sim::TimeNs(3) + sim::TimeNs(4) == sim::TimeNs(7));
}

TEST_CASE("roofline: a graph op costs max(FLOPs over peak x eff, bytes over HBM bw)",
          "[sim][cost]") {
  // Toy graph op 1 (blocks.0.fc, linear): fwd 32 B T FLOPs, bwd 64 B T. At
  // B = 1, T = 4 and 1e9 FLOP/s: forward 128 ns, backward 256 ns. With 400
  // fp32 bytes of forward traffic at 1 B/ns the op is memory-bound: 400 ns;
  // in bf16 the bytes halve (200 ns) and the 2e9 FLOP/s peak x 0.5
  // efficiency gives 128 ns: 200 ns.
  plan::Graph g = test::toy_graph();
  plan::Schedule s;
  s.workload = plan::Workload{1, 4};
  s.streams = {"host", "compute"};
  s.stream_roles = {plan::StreamRole::host, plan::StreamRole::compute};
  plan::ScheduleOp fwd;
  fwd.kind = plan::OpKind::forward;
  fwd.stream = 1;
  fwd.graph_op = 1;
  plan::ScheduleOp bwd = fwd;
  bwd.kind = plan::OpKind::backward;
  s.ops = {fwd, bwd};
  sim::HardwareModel hw = test::unit_hardware();
  {
    sim::CostModel cost(hw, g, s);
    CHECK(cost.duration(0) == sim::TimeNs(128));
    CHECK(cost.duration(1) == sim::TimeNs(256));
    CHECK(cost.flops(0) == 128.0);
  }
  g.ops[1].fwd_bytes = plan::Poly::term(100, 1, 1);
  {
    sim::CostModel cost(hw, g, s);
    CHECK(cost.duration(0) == sim::TimeNs(400));
  }
  s.ops[0].dtype = plan::DType::bf16;
  hw.peak_flops_bf16 = 2e9;
  hw.efficiency = {{"linear", 0.5}};
  sim::CostModel cost(hw, g, s);
  CHECK(cost.bytes(0) == 200.0);
  CHECK(cost.duration(0) == sim::TimeNs(200));
}
