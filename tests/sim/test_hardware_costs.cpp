// Op costs from hardware figures: the roofline, dtype efficiencies, efficiency
// curves, memory-bound ops, backward efficiencies, the published GPU figures and
// the limits on what a hardware file may make an op or collective last.
#include <catch2/catch.hpp>

#include <cmath>

#include "sim/cost_model.h"
#include "sim/hardware.h"
#include "tests/plan/toy_graph.h"
#include "tests/sim/sim_fixtures.h"

using namespace shardscope;
using nlohmann::json;

namespace {
// A schedule at B = 1, T = 4 with a host stream (0) and a compute stream (1),
// for ops to be priced one at a time.
plan::Schedule toy_schedule() {
  plan::Schedule s;
  s.workload = plan::Workload{1, 4};
  s.streams = {"host", "compute"};
  s.stream_roles = {plan::StreamRole::host, plan::StreamRole::compute};
  return s;
}
}  // namespace

TEST_CASE("roofline: a graph op costs max(FLOPs over peak x eff, bytes over HBM bw)",
          "[sim][cost]") {
  // Toy graph op 1 (blocks.0.fc, linear): fwd 32 B T FLOPs, bwd 64 B T. At
  // B = 1, T = 4 and 1e9 FLOP/s: forward 128 ns, backward 256 ns. With 400
  // fp32 bytes of forward traffic at 1 B/ns the op is memory-bound: 400 ns;
  // in bf16 the bytes halve (200 ns) and the 2e9 FLOP/s peak x 0.5
  // efficiency gives 128 ns: 200 ns.
  plan::Graph g = test::toy_graph();
  plan::Schedule s = toy_schedule();
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

TEST_CASE("a dtype's efficiency replaces the shared one for ops of that dtype only",
          "[sim][hw][cost]") {
  // Toy op 1 forward: 128 FLOPs at B = 1, T = 4. fp32 at 1e9 FLOP/s x 1: 128
  // ns; bf16 at 2e9 x 0.25 (its own entry, not the shared 1.0): 256 ns.
  plan::Graph g = test::toy_graph();
  plan::Schedule s = toy_schedule();
  plan::ScheduleOp fwd;
  fwd.kind = plan::OpKind::forward;
  fwd.stream = 1;
  fwd.graph_op = 1;
  plan::ScheduleOp fwd_bf16 = fwd;
  fwd_bf16.dtype = plan::DType::bf16;
  s.ops = {fwd, fwd_bf16};
  sim::HardwareModel hw = test::unit_hardware();
  hw.peak_flops_bf16 = 2e9;
  hw.efficiency = {{"linear", 1.0}};
  hw.dtype_efficiency[plan::DType::bf16] = {{"linear", 0.25}};
  CHECK(hw.efficiency_of("linear", plan::DType::f32) == 1.0);
  CHECK(hw.efficiency_of("linear", plan::DType::bf16) == 0.25);
  CHECK(hw.efficiency_of("attention", plan::DType::bf16) == hw.efficiency_of("attention"));
  sim::CostModel cost(hw, g, s);
  CHECK(cost.duration(0) == sim::TimeNs(128));
  CHECK(cost.duration(1) == sim::TimeNs(256));

  // JSON: written only when present, read back, merged over the base.
  const json doc = sim::hardware_to_json(hw);
  CHECK(doc["dtype_efficiency"] == json{{"bf16", {{"linear", 0.25}}}});
  CHECK_FALSE(sim::hardware_to_json(sim::hardware_preset("h100-sxm")).contains("dtype_efficiency"));
  const sim::HardwareModel back = sim::hardware_from_json(
      json{{"base", "h100-sxm"}, {"dtype_efficiency", {{"bfloat16", {{"linear", 0.3}}}}}}, "x");
  CHECK(back.efficiency_of("linear", plan::DType::bf16) == 0.3);
  CHECK(back.efficiency_of("linear", plan::DType::f32) ==
        sim::hardware_preset("h100-sxm").efficiency_of("linear"));
}

TEST_CASE("bad dtype_efficiency entries are errors naming the field", "[sim][hw]") {
  const std::vector<std::pair<json, std::string>> bad = {
      {json{{"dtype_efficiency", 3}}, "'dtype_efficiency' must be an object"},
      {json{{"dtype_efficiency", {{"int4", {{"linear", 0.5}}}}}}, "dtype_efficiency.int4"},
      {json{{"dtype_efficiency", {{"bf16", 0.5}}}}, "'dtype_efficiency.bf16' must be an object"},
      {json{{"dtype_efficiency", {{"bf16", {{"linear", "fast"}}}}}},
       "dtype_efficiency.bf16.linear"},
      {json{{"dtype_efficiency", {{"bf16", {{"linear", 1.5}}}}}}, "dtype_efficiency.bf16.linear"},
      {json{{"dtype_efficiency", {{"i64", {{"linear", 0.5}}}}}}, "no compute peak for dtype i64"},
  };
  for (const auto& [doc, message] : bad) {
    INFO(doc.dump());
    try {
      sim::hardware_from_json(doc, "hw.json");
      FAIL("no error");
    } catch (const sim::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(message));
    }
  }
}

TEST_CASE("an efficiency curve is piecewise linear in log FLOPs, constant above its end",
          "[sim][hw][cost]") {
  sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  hw.efficiency_curves.clear();  // the preset's published curves
  hw.efficiency_curves[plan::DType::bf16]["linear"] = {{1e8, 0.2}, {1e10, 0.6}, {1e12, 0.4}};
  const auto at = [&](double flops) {
    return hw.efficiency_of("linear", plan::DType::bf16, flops);
  };
  // Below the first knot: its segment continued (slope 0.4 per factor 100),
  // floored at the knot's time (0.2 x FLOPs / 1e8) and capped at 0.2.
  CHECK(at(std::pow(10.0, 7.5)) == Approx(0.1).epsilon(1e-12));
  CHECK(at(1e6) == Approx(0.002).epsilon(1e-12));
  CHECK(at(1e8) == 0.2);
  CHECK(at(1e9) == Approx(0.4).epsilon(1e-12));  // half way (in log FLOPs) from 1e8 to 1e10
  CHECK(at(1e10) == Approx(0.6).epsilon(1e-12));
  CHECK(at(1e11) == Approx(0.5).epsilon(1e-12));
  CHECK(at(1e13) == 0.4);  // beyond the last
  // Other dtypes and types: the scalar entries.
  CHECK(hw.efficiency_of("linear", plan::DType::f32, 1e9) == hw.efficiency_of("linear"));
  CHECK(hw.efficiency_of("attention", plan::DType::bf16, 1e9) == hw.efficiency_of("attention"));
  hw.validate();

  const json doc = sim::hardware_to_json(hw);
  CHECK(doc["efficiency_curves"]["bf16"]["linear"] == json{{1e8, 0.2}, {1e10, 0.6}, {1e12, 0.4}});
  json with_base = doc;
  with_base["base"] = "h100-sxm";
  const sim::HardwareModel back = sim::hardware_from_json(with_base, "x");
  CHECK(back.efficiency_of("linear", plan::DType::bf16, 1e11) == at(1e11));

  const std::vector<std::pair<json, std::string>> bad = {
      {json{{"efficiency_curves", {{"bf16", {{"linear", {{1e8, 0.5}}}}}}}}, "at least 2 knots"},
      {json{{"efficiency_curves", {{"bf16", {{"linear", {{1e9, 0.5}, {1e8, 0.5}}}}}}}},
       "efficiency_curves.bf16.linear[1]: FLOPs must ascend"},
      {json{{"efficiency_curves", {{"bf16", {{"linear", {{1e8, 0.5}, {1e9, 0}}}}}}}},
       "efficiency_curves.bf16.linear[1]: efficiency must be in (0, 1]"},
      {json{{"efficiency_curves", {{"bf16", {{"linear", {{-1, 0.5}, {1e9, 0.5}}}}}}}},
       "efficiency_curves.bf16.linear[0]: FLOPs must be > 0"},
      {json{{"efficiency_curves", {{"bf16", {{"linear", {1e8, 0.5}}}}}}},
       "efficiency_curves.bf16.linear[0]' must be [FLOPs, efficiency]"},
      {json{{"efficiency_curves", {{"bf16", {{"linear", 0.5}}}}}}, "must be an array"},
      {json{{"efficiency_curves", {{"int4", {}}}}}, "efficiency_curves.int4"},
  };
  for (const auto& [d, message] : bad) {
    INFO(d.dump());
    try {
      sim::hardware_from_json(d, "hw.json");
      FAIL("no error");
    } catch (const sim::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(message));
    }
  }
}

TEST_CASE("an op kind without FLOPs costs fixed + bytes over HBM bw x efficiency",
          "[sim][hw][cost]") {
  // A grad_cast of 4000 bytes at 1 B/ns (unit hardware): 4000 ns by default;
  // with {fixed 500 ns, efficiency 0.25}: 500 + 16000 ns. On the host stream
  // (offloaded optimizer) the fit does not apply.
  plan::Graph g = test::toy_graph();
  plan::Schedule s = toy_schedule();
  plan::ScheduleOp cast;
  cast.kind = plan::OpKind::grad_cast;
  cast.stream = 1;
  cast.bytes = 4000;
  plan::ScheduleOp on_host = cast;
  on_host.stream = 0;
  s.ops = {cast, on_host};
  sim::HardwareModel hw = test::unit_hardware();
  {
    sim::CostModel cost(hw, g, s);
    CHECK(cost.duration(0) == sim::TimeNs(4000));
  }
  hw.memory_ops["grad_cast"] = {500, 0.25};
  hw.validate();
  sim::CostModel cost(hw, g, s);
  CHECK(cost.duration(0) == sim::TimeNs(16500));
  CHECK(cost.duration(1) ==
        sim::TimeNs::from_seconds(4000.0 / hw.host_memory_bytes_per_s));  // host: unchanged

  const json doc = sim::hardware_to_json(hw);
  CHECK(doc["memory_ops"] ==
        json{{"grad_cast", {{"fixed_ns", 500}, {"bandwidth_efficiency", 0.25}}}});
  CHECK_FALSE(sim::hardware_to_json(sim::hardware_preset("h100-sxm")).contains("memory_ops"));
  const sim::HardwareModel back = sim::hardware_from_json(
      json{{"memory_ops", {{"copy_out", {{"fixed_ns", 7}, {"bandwidth_efficiency", 0.5}}}}}}, "x");
  CHECK(back.memory_ops.at("copy_out").fixed_ns == 7);
  CHECK(back.memory_ops.at("copy_out").bandwidth_efficiency == 0.5);
  const std::vector<std::pair<json, std::string>> bad = {
      {json{{"memory_ops", 1}}, "'memory_ops' must be an object"},
      {json{{"memory_ops", {{"copy_out", 1}}}}, "'memory_ops.copy_out' must be an object"},
      {json{{"memory_ops", {{"copy_out", {{"fixed", 1}}}}}}, "'memory_ops.copy_out.fixed'"},
      {json{{"memory_ops", {{"copy_out", {{"fixed_ns", -1}}}}}}, "memory_ops.copy_out.fixed_ns"},
      {json{{"memory_ops", {{"copy_out", {{"bandwidth_efficiency", 2}}}}}},
       "memory_ops.copy_out.bandwidth_efficiency"},
  };
  for (const auto& [d, message] : bad) {
    INFO(d.dump());
    try {
      sim::hardware_from_json(d, "hw.json");
      FAIL("no error");
    } catch (const sim::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(message));
    }
  }
}

TEST_CASE("efficiency keys must be op types, memory_ops keys op kinds without FLOPs", "[sim][hw]") {
  // A misspelt type used to be kept and never used.
  const std::vector<std::pair<json, std::string>> bad = {
      {json{{"efficiency", {{"linaer", 0.5}}}}, "'efficiency.linaer': 'linaer' is not an op type"},
      {json{{"dtype_efficiency", {{"bf16", {{"default", 0.5}}}}}},
       "'dtype_efficiency.bf16.default': 'default' is not an op type"},
      {json{{"efficiency_curves", {{"bf16", {{"matmul", {{1e8, 0.5}, {1e9, 0.6}}}}}}}},
       "'efficiency_curves.bf16.matmul': 'matmul' is not an op type"},
      {json{{"memory_ops", {{"linear", {{"fixed_ns", 1}}}}}},
       "'memory_ops.linear': 'linear' is not an op kind without FLOPs"},
  };
  for (const auto& [d, message] : bad) {
    INFO(d.dump());
    try {
      sim::hardware_from_json(d, "hw.json");
      FAIL("no error");
    } catch (const sim::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(message));
    }
  }
  CHECK(sim::hardware_from_json(json{{"efficiency", {{"default", 0.5}, {"rope", 0.9}}}})
            .efficiency_of("rope") == 0.9);
  CHECK(sim::is_memory_op_kind("grad_cast"));
  CHECK_FALSE(sim::is_memory_op_kind("all_gather"));
  CHECK(sim::is_graph_op_type("swiglu"));
  CHECK_FALSE(sim::is_graph_op_type("default"));
}

TEST_CASE("backward ops take TYPE.backward efficiencies, else their forward type's",
          "[sim][hw][cost]") {
  // Toy op 1 (linear): forward 128 FLOPs, backward 256 at B = 1, T = 4 and
  // 1e9 FLOP/s. linear.backward 0.5: backward 512 ns; forward stays at the
  // linear entry (1.0): 128 ns.
  plan::Graph g = test::toy_graph();
  plan::Schedule s = toy_schedule();
  plan::ScheduleOp fwd;
  fwd.kind = plan::OpKind::forward;
  fwd.stream = 1;
  fwd.graph_op = 1;
  plan::ScheduleOp bwd = fwd;
  bwd.kind = plan::OpKind::backward;
  plan::ScheduleOp rec = fwd;
  rec.kind = plan::OpKind::recompute;
  s.ops = {fwd, bwd, rec};
  sim::HardwareModel hw = test::unit_hardware();
  hw.efficiency = {{"linear", 1.0}, {"linear.backward", 0.5}};
  {
    sim::CostModel cost(hw, g, s);
    CHECK(cost.duration(0) == sim::TimeNs(128));
    CHECK(cost.duration(1) == sim::TimeNs(512));
    CHECK(cost.duration(2) == sim::TimeNs(128));  // recompute is forward work
  }
  // Precedence: the backward key at any level first, then the forward type's.
  hw.efficiency = {{"default", 0.8}};
  CHECK(hw.efficiency_of("linear.backward") == 0.8);
  hw.efficiency["linear"] = 0.6;
  CHECK(hw.efficiency_of("linear.backward") == 0.6);
  hw.dtype_efficiency[plan::DType::bf16] = {{"linear", 0.4}};
  CHECK(hw.efficiency_of("linear.backward", plan::DType::bf16) == 0.4);
  CHECK(hw.efficiency_of("linear.backward", plan::DType::bf16, 1e9) == 0.4);
  hw.efficiency["linear.backward"] = 0.3;
  CHECK(hw.efficiency_of("linear.backward", plan::DType::bf16) == 0.3);
  CHECK(hw.efficiency_of("linear.backward", plan::DType::bf16, 1e9) == 0.3);
  hw.efficiency_curves[plan::DType::bf16]["linear.backward"] = {{1e8, 0.2}, {1e10, 0.2}};
  CHECK(hw.efficiency_of("linear.backward", plan::DType::bf16, 1e9) == 0.2);
  CHECK(hw.efficiency_of("linear", plan::DType::bf16, 1e9) == 0.4);
  hw.validate();

  // JSON: backward keys are read and written; other suffixes are refused.
  const sim::HardwareModel back = sim::hardware_from_json(
      json{{"efficiency", {{"attention.backward", 0.25}}}, {"op_dispatch_ns", 40000}}, "x");
  CHECK(back.efficiency_of("attention.backward") == 0.25);
  CHECK(back.op_dispatch_ns == 40000);
  CHECK(sim::hardware_to_json(back)["op_dispatch_ns"] == 40000);
  CHECK(sim::is_efficiency_key("gelu.backward"));
  CHECK_FALSE(sim::is_efficiency_key("gelu.bwd"));
  CHECK_FALSE(sim::is_efficiency_key(".backward"));
  for (const json& bad : {json{{"efficiency", {{"linear.bwd", 0.5}}}},
                          json{{"dtype_efficiency", {{"bf16", {{"matmul.backward", 0.5}}}}}}}) {
    INFO(bad.dump());
    CHECK_THROWS_WITH(sim::hardware_from_json(bad, "hw.json"),
                      Catch::Contains("is not an op type") && Catch::Contains("'.backward'"));
  }
  CHECK_THROWS_WITH(sim::hardware_from_json(json{{"op_dispatch_ns", -1}}, "hw.json"),
                    Catch::Contains("op_dispatch_ns must be >= 0"));
}

TEST_CASE("GPU presets carry the published GEMM, attention and all-reduce figures", "[sim][hw]") {
  const sim::HardwareModel h100 = sim::hardware_preset("h100-sxm");
  const auto linear = [](const sim::HardwareModel& hw, double flops) {
    return hw.efficiency_of("linear", plan::DType::bf16, flops);
  };
  // XLA's sm_90 table: 1024^3 at 236.30, 4096^3 at 783.33 TFLOP/s of 989.
  CHECK(linear(h100, 2.0 * 1024 * 1024 * 1024) == Approx(236.30 / 989).epsilon(1e-12));
  CHECK(linear(h100, 2.0 * 4096 * 4096 * 4096) == Approx(783.33 / 989).epsilon(1e-12));
  CHECK(linear(h100, 1e13) == Approx(783.33 / 989).epsilon(1e-12));  // held above
  CHECK(h100.efficiency_of("linear", plan::DType::f16, 2.0 * 4096 * 4096 * 4096) ==
        Approx(783.33 / 989).epsilon(1e-12));
  CHECK(h100.efficiency_of("linear", plan::DType::f32, 1e11) == 0.7);  // fp32: no table
  // FlashAttention-2 causal hd128 forward at T = 8k: 333 TFLOP/s on half the
  // FLOPs the plan counts (4 x 2 x 8192^2 x 2048 forward).
  const double fwd8k = 4.0 * 2 * 8192.0 * 8192.0 * 2048;
  CHECK(h100.efficiency_of("attention", plan::DType::bf16, fwd8k) ==
        Approx(2 * 333.0 / 989).epsilon(1e-12));
  // Backward at 2.5x the FLOPs: 2.5 / (3.5 / 308 - 1 / 333) = 299.0 TFLOP/s.
  CHECK(h100.efficiency_of("attention.backward", plan::DType::bf16, 2.5 * fwd8k) ==
        Approx(2 * 2.5 / (3.5 / 308 - 1.0 / 333) / 989).epsilon(1e-12));
  // nccl-tests: ring all-gather at ~370 GB/s; all-reduce over 8 GPUs of one
  // node from its two fitted lines: up to 16 MiB 37.3 us + 336.9 GB/s,
  // above 76.0 us + 470.1 GB/s.
  CHECK(h100.nvlink_bus_bytes_per_s == 370e9);
  const sim::CollectiveFit* ar = h100.collective_fit(plan::OpKind::all_reduce, 8, false);
  REQUIRE(ar != nullptr);
  CHECK(ar->small_max_bytes == 16 << 20);
  sim::GroupSpan node;
  node.ranks = 8;
  node.nodes = 1;
  node.min_per_node = node.max_per_node = 8;
  // 1 MiB: 37300 + 2 x 2^20 x 7/8 / 336.9e9 s = 37300 + 5447 ns.
  CHECK(sim::collective_time(h100, plan::OpKind::all_reduce, 1 << 20, node).ns ==
        37300 + std::llround(2.0 * (1 << 20) * 7 / 8 / 336.9e9 * 1e9));
  CHECK(sim::collective_time(h100, plan::OpKind::all_reduce, 1 << 30, node).ns ==
        76000 + std::llround(2.0 * (1 << 30) * 7 / 8 / 470.1e9 * 1e9));
  const json fit = {{"kind", "all_gather"}, {"ranks", 8}, {"bus_bytes_per_s", 3e11}};
  for (const auto& [small, message] : std::vector<std::pair<json, std::string>>{
           {json{{"latency_ns", 1}, {"bus_bytes_per_s", 1e11}}, "collectives[0].small.max_bytes"},
           {json{{"max_bytes", 1024}}, "collectives[0].small.bus_bytes_per_s' is missing"},
           {json{{"max_bytes", 1024}, {"bus_bytes_per_s", 1e11}, {"lat", 1}},
            "unknown hardware key 'collectives[0].small.lat'"},
           {json{{"max_bytes", 1024}, {"bus_bytes_per_s", -1}},
            "small.bus_bytes_per_s must be > 0"},
           {json(5), "collectives[0].small' must be an object"}}) {
    json f = fit;
    f["small"] = small;
    INFO(f.dump());
    CHECK_THROWS_WITH(sim::hardware_from_json(json{{"collectives", {f}}}, "hw.json"),
                      Catch::Contains(message));
  }
  CHECK(h100.collective_fit(plan::OpKind::all_reduce, 16, false) == nullptr);
  const sim::HardwareModel h200 = sim::hardware_preset("h200-sxm");
  CHECK(h200.nvlink_bus_bytes_per_s == 362e9);
  CHECK(linear(h200, 2.0 * 4096 * 4096 * 4096) == linear(h100, 2.0 * 4096 * 4096 * 4096));
  const sim::HardwareModel a100 = sim::hardware_preset("a100-sxm");
  CHECK(linear(a100, 2.0 * 8192 * 8192 * 8192) == Approx(253.7 / 312).epsilon(1e-12));
  CHECK(a100.efficiency_of("attention", plan::DType::bf16, fwd8k) == 0.5);  // not published
  CHECK(a100.nvlink_bus_bytes_per_s == 231e9);

  // A document that sets a type's efficiency replaces the base's curves for
  // it (all dtypes from `efficiency`, one from `dtype_efficiency`).
  const sim::HardwareModel flat =
      sim::hardware_from_json(json{{"base", "h100-sxm"}, {"efficiency", {{"linear", 0.5}}}}, "x");
  CHECK(linear(flat, 1e9) == 0.5);
  const sim::HardwareModel attn = sim::hardware_from_json(
      json{{"base", "h100-sxm"}, {"efficiency", {{"attention", 0.35}}}}, "x");
  CHECK(attn.efficiency_of("attention.backward", plan::DType::bf16, 2.5 * fwd8k) == 0.35);
  CHECK(flat.efficiency_of("attention", plan::DType::bf16, fwd8k) ==
        h100.efficiency_of("attention", plan::DType::bf16, fwd8k));
  const sim::HardwareModel one = sim::hardware_from_json(
      json{{"base", "h100-sxm"}, {"dtype_efficiency", {{"fp16", {{"linear", 0.4}}}}}}, "x");
  CHECK(one.efficiency_of("linear", plan::DType::f16, 1e9) == 0.4);
  CHECK(linear(one, 1e9) == linear(h100, 1e9));
  // A written model reads back exactly, curves included.
  json back = sim::hardware_to_json(h100);
  back["base"] = "h100-sxm";
  CHECK(sim::hardware_to_json(sim::hardware_from_json(back, "h100-sxm")) ==
        sim::hardware_to_json(h100));
}

TEST_CASE("a hardware figure that makes an op last over 1e6 s is an error naming the key",
          "[sim][hw][cost]") {
  // Such figures passed validation (> 0) and overflowed the step's ns clock
  // ("event with a negative or overflowing duration").
  plan::Graph g = test::toy_graph();
  plan::Schedule s = toy_schedule();
  plan::ScheduleOp fwd;
  fwd.kind = plan::OpKind::forward;
  fwd.stream = 1;
  fwd.graph_op = 1;
  plan::ScheduleOp cast;
  cast.kind = plan::OpKind::cast_params;
  cast.stream = 1;
  cast.bytes = 1000;
  s.ops = {fwd, cast};
  sim::HardwareModel hw = test::unit_hardware();
  hw.name = "slow.json";
  hw.peak_flops_fp32 = 1e-200;
  CHECK_THROWS_WITH(sim::CostModel(hw, g, s).duration(0),
                    Catch::Contains("hardware 'slow.json': op 'blocks.0.fc'") &&
                        Catch::Contains("check peak_flops_fp32 and the efficiency of 'linear'"));
  hw = test::unit_hardware();
  hw.hbm_bytes_per_s = 1e-300;
  CHECK_THROWS_WITH(
      sim::CostModel(hw, g, s).duration(1),
      Catch::Contains("op cast_params would take") && Catch::Contains("check hbm_bytes_per_s"));
  hw = test::unit_hardware();
  hw.nvlink_bus_bytes_per_s = 1e-300;
  sim::GroupSpan two;
  two.ranks = 2;
  two.nodes = 1;
  two.min_per_node = two.max_per_node = 2;
  CHECK_THROWS_WITH(sim::collective_time(hw, plan::OpKind::all_gather, 1e6, two),
                    Catch::Contains("collective all_gather over 2 ranks") &&
                        Catch::Contains("check nvlink_bus_bytes_per_s"));
  // 1e6 s itself is allowed: 1e9 B at 1e3 B/s.
  hw.nvlink_bus_bytes_per_s = 1e3;
  CHECK(sim::collective_time(hw, plan::OpKind::all_gather, 2e9, two).ns == 1000000000000000LL);
}

TEST_CASE("a latency or overhead above 1000 s is refused naming the file, key, value and limit",
          "[sim][hw]") {
  // 2^63-1 passed (>= 0) and overflowed the step's clock: "event with a
  // negative or overflowing duration" from the metrics, naming neither.
  const int64_t huge = INT64_MAX;
  const std::string limit =
      " exceeds the limit 1000000000000 ns (1000 s; real latencies and overheads are "
      "microseconds";
  for (const char* key : {"op_dispatch_ns", "launch_overhead_ns", "nvlink_latency_ns",
                          "ib_latency_ns", "collective_latency_ns"}) {
    INFO(key);
    CHECK_THROWS_WITH(sim::hardware_from_json(json{{"base", "h100-sxm"}, {key, huge}}, "hw.json"),
                      Catch::StartsWith("hardware 'hw.json': " + std::string(key) +
                                        " = 9223372036854775807" + limit));
  }
  const json fit = {
      {"kind", "all_gather"}, {"ranks", 8}, {"latency_ns", huge}, {"bus_bytes_per_s", 1e11}};
  CHECK_THROWS_WITH(
      sim::hardware_from_json(json{{"base", "h100-sxm"}, {"collectives", {fit}}}, "hw.json"),
      Catch::StartsWith("hardware 'hw.json': collectives[0].latency_ns = 9223372036854775807" +
                        limit));
  CHECK_THROWS_WITH(
      sim::hardware_from_json(
          json{{"base", "h100-sxm"}, {"memory_ops", {{"grad_cast", {{"fixed_ns", huge}}}}}},
          "hw.json"),
      Catch::StartsWith("hardware 'hw.json': memory_ops.grad_cast.fixed_ns = "
                        "9223372036854775807" +
                        limit));
  // At the limit: accepted.
  CHECK_NOTHROW(sim::hardware_from_json(
      json{{"base", "h100-sxm"}, {"op_dispatch_ns", sim::kMaxLatencyNs}}, "hw.json"));
}

TEST_CASE("collective latency over many ranks is bounded like the transfer, naming the keys",
          "[sim][hw][cost]") {
  // 2 x (2^20 - 1) hops of 1000 s each: 2.1e9 s for one all-reduce, which
  // was returned as 2.1e18 ns and overflowed the step's clock a few ops on.
  sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  hw.name = "slow.json";
  hw.ib_latency_ns = sim::kMaxLatencyNs;
  hw.validate();
  const int64_t ranks = int64_t{1} << 20;
  const sim::GroupSpan span{ranks, ranks / 8, 8, 8};
  CHECK_THROWS_WITH(sim::collective_time(hw, plan::OpKind::all_gather, 8000, span),
                    Catch::StartsWith("hardware 'slow.json': collective all_gather over 1048576 "
                                      "ranks (latency) would take") &&
                        Catch::EndsWith("check collective_latency_ns and ib_latency_ns"));
  // Under 1e6 s the closed form is unchanged (exact: the ring test above).
}

TEST_CASE("hardware device family: presets, JSON key and a bad value named", "[sim][hw][sdpa]") {
  CHECK(sim::hardware_preset("h100-sxm").device == plan::DeviceFamily{true, 90});
  CHECK(sim::hardware_preset("h200-sxm").device == plan::DeviceFamily{true, 90});
  CHECK(sim::hardware_preset("a100-sxm").device == plan::DeviceFamily{true, 80});
  CHECK(sim::hardware_preset("cpu-local").device == plan::DeviceFamily{});
  CHECK(sim::hardware_to_json(sim::hardware_preset("a100-sxm"))["device"] == "sm_80");
  // Over its base (h100-sxm unless named): the key replaces the base's.
  CHECK(sim::hardware_from_json(json{{"device", "sm_120"}}, "hw.json").device ==
        plan::DeviceFamily{true, 120});
  CHECK(sim::hardware_from_json(json{{"base", "cpu-local"}}, "hw.json").device ==
        plan::DeviceFamily{});
  CHECK_THROWS_WITH(sim::hardware_from_json(json{{"device", "mi300"}}, "hw.json"),
                    Catch::Contains("hw.json: hardware key 'device': expected \"cpu\" or a CUDA "
                                    "arch \"sm_<major><minor>\" (sm_80, sm_90), got \"mi300\""));
  CHECK_THROWS_WITH(sim::hardware_from_json(json{{"device", 90}}, "hw.json"),
                    Catch::Contains("hardware key 'device' has the wrong type"));
}
