// Host dispatch (OpLevelModel::host_dispatch_ns, sim/hardware_op_level.h):
// the host time eager PyTorch spends before each launch, and the device
// waiting for it. Exact simulated times on the toy graph and the unit
// hardware (1 FLOP = 1 ns, 1 B = 1 ns); the JSON keys and their errors.
#include <catch2/catch.hpp>

#include <string>

#include "plan/units.h"
#include "sim/calibrate.h"
#include "sim/hardware.h"
#include "sim/simulator.h"
#include "tests/plan/toy_graph.h"
#include "tests/sim/sim_fixtures.h"
#include "traces/trace.h"

using namespace shardscope;
using nlohmann::json;
using plan::OpKind;
using sim::TimeNs;

namespace {

// Toy graph at (B, T) = (1, 4), fp32. Schedule ops: 0 cast_params of unit 0
// (3 parameters) moving 100 B (100 ns) on `cast_stream`; 1 and 2 the forward
// of blocks.0.fc (a 4 x 4 linear: 128 FLOPs, 128 ns) and of blocks.1.fc, 1
// waiting for 0; 3 blocks.0.fc's backward (256 ns). Launched in that order.
struct HostBound {
  plan::Graph g = test::toy_graph();
  plan::UnitPlan units;
  plan::Schedule s;
  explicit HostBound(plan::StreamRole cast_role) {
    for (int linear : {1, 2}) {
      g.ops[static_cast<size_t>(linear)].attrs.in_features = 4;
      g.ops[static_cast<size_t>(linear)].attrs.out_features = 4;
    }
    units.units.resize(1);
    units.units[0].name = "u0";
    units.units[0].params = {0, 1, 2};
    s.world = plan::World{1, 1, 1};
    s.workload = plan::Workload{1, 4};
    s.streams = {"host", "compute", "ag_copy_in"};
    s.stream_roles = {plan::StreamRole::host, plan::StreamRole::compute,
                      plan::StreamRole::ag_copy_in};
    plan::ScheduleOp cast;
    cast.kind = OpKind::cast_params;
    cast.stream = cast_role == plan::StreamRole::ag_copy_in ? 2 : 1;
    cast.unit = 0;
    cast.bytes = 100;
    plan::ScheduleOp fc0;
    fc0.kind = OpKind::forward;
    fc0.stream = 1;
    fc0.graph_op = 1;
    fc0.dtype = plan::DType::f32;
    fc0.waits = {0};
    plan::ScheduleOp fc1 = fc0;
    fc1.graph_op = 2;
    fc1.waits = {};
    plan::ScheduleOp bwd = fc0;
    bwd.kind = OpKind::backward;
    bwd.waits = {};
    s.ops = {cast, fc0, fc1, bwd};
    for (int op = 0; op < 4; ++op)
      s.actions.push_back(plan::Action{plan::ActionKind::launch, op, -1, {}});
  }
  sim::SimResult run(const sim::HardwareModel& hw) const { return sim::simulate(g, units, s, hw); }
};

// cast_params 1000 ns + 200 per parameter, linear forward 500, 50 for other
// forward types; linear.backward has no entry (0: no fallback to the forward's).
sim::HardwareModel host_hardware() {
  sim::HardwareModel hw = test::unit_hardware();
  hw.op_level.host_dispatch_ns = {{"cast_params", 1000}, {"linear", 500}, {"default", 50}};
  hw.op_level.host_dispatch_per_param_ns = {{"cast_params", 200}};
  return hw;
}

}  // namespace

TEST_CASE("host dispatch: the device waits for each launch, step = host-bound chain",
          "[sim][exact][op_level]") {
  const HostBound toy(plan::StreamRole::ag_copy_in);
  // Without host time: cast [0, 100), fc0 [100, 228), fc1 [228, 356), bwd
  // [356, 612).
  const sim::SimResult free_run = toy.run(test::unit_hardware());
  CHECK(free_run.op_start[1] == TimeNs(100));
  CHECK(free_run.step_time == TimeNs(612));
  // The copy-in on ag_copy_in pays 1000 + 3 x 200: launched at 1600, runs
  // [1600, 1700). fc0 is launched 500 later, at 2100, after its input is
  // ready: [2100, 2228). fc1 at 2600, when the device has long been idle:
  // [2600, 2728). The backward costs the host nothing: launched at 2600, it
  // runs after fc1: [2728, 2984).
  const sim::SimResult r = toy.run(host_hardware());
  CHECK(r.op_start[0] == TimeNs(1600));
  CHECK(r.op_start[1] == TimeNs(2100));
  CHECK(r.op_start[2] == TimeNs(2600));
  CHECK(r.op_start[3] == TimeNs(2728));
  CHECK(r.step_time == TimeNs(2984));
  // launch_overhead_ns adds to it on every launch: 4 x 10 more host time,
  // the backward's launch included: 1610, 2120, 2630, bwd [2758, 3014).
  sim::HardwareModel overhead = host_hardware();
  overhead.launch_overhead_ns = 10;
  const sim::SimResult o = toy.run(overhead);
  CHECK(o.op_start[0] == TimeNs(1610));
  CHECK(o.op_start[2] == TimeNs(2630));
  CHECK(o.step_time == TimeNs(3014));
}

TEST_CASE("host dispatch: a cast outside FSDP2's copy-in stream counts one parameter",
          "[sim][exact][op_level]") {
  // On the compute stream (FSDP1's flat parameter, DDP): 1000 + 1 x 200.
  // cast [1200, 1300), fc0 launched at 1700 [1700, 1828), fc1 at 2200
  // [2200, 2328), bwd [2328, 2584).
  const HostBound toy(plan::StreamRole::compute);
  const sim::SimResult r = toy.run(host_hardware());
  CHECK(r.op_start[0] == TimeNs(1200));
  CHECK(r.op_start[1] == TimeNs(1700));
  CHECK(r.op_start[2] == TimeNs(2200));
  CHECK(r.step_time == TimeNs(2584));
}

TEST_CASE("host dispatch lookup: own key, default for forward graph ops only, per parameter",
          "[sim][op_level]") {
  const sim::OpLevelModel m = host_hardware().op_level;
  CHECK(m.host_dispatch_ns_of("linear", true, 1) == 500);
  CHECK(m.host_dispatch_ns_of("gelu", true, 1) == 50);             // default
  CHECK(m.host_dispatch_ns_of("linear.backward", false, 1) == 0);  // no fallback
  CHECK(m.host_dispatch_ns_of("optimizer", false, 1) == 0);        // not a graph op
  CHECK(m.host_dispatch_ns_of("cast_params", false, 12) == 3400);  // 1000 + 12 x 200
  sim::OpLevelModel huge = m;
  huge.host_dispatch_per_param_ns["cast_params"] = sim::kMaxLatencyNs;
  CHECK(huge.host_dispatch_ns_of("cast_params", false, int64_t{1} << 40) == INT64_MAX);
  CHECK(!m.is_default());
}

TEST_CASE("host dispatch JSON: round trip, merge into the base, errors name key and value",
          "[sim][hw][op_level]") {
  const json doc = {{"base", "h200-sxm"},
                    {"op_level",
                     {{"host_dispatch_ns", {{"linear", 1000}, {"rmsnorm.backward", 7}}},
                      {"host_dispatch_per_param_ns", {{"cast_params", 0}}}}}};
  const sim::HardwareModel h = sim::hardware_from_json(doc, "mine.json");
  CHECK(h.op_level.host_dispatch_ns.at("linear") == 1000);
  CHECK(h.op_level.host_dispatch_ns.at("rmsnorm.backward") == 7);
  CHECK(h.op_level.host_dispatch_ns.at("attention") == 114'500);  // the base's, merged
  CHECK(h.op_level.host_dispatch_per_param_ns.at("cast_params") == 0);
  const json back = sim::hardware_to_json(h)["op_level"];
  CHECK(back["host_dispatch_ns"]["linear"] == 1000);
  CHECK(sim::hardware_from_json(sim::hardware_to_json(h), "again").op_level.host_dispatch_ns ==
        h.op_level.host_dispatch_ns);

  const auto error = [](const json& op_level) {
    try {
      sim::hardware_from_json(json{{"op_level", op_level}}, "hw.json");
    } catch (const sim::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error({{"host_dispatch_ns", {{"linear", -1}}}}) ==
        "hardware 'hw.json': op_level.host_dispatch_ns.linear = -1 is out of range [0, "
        "1000000000000]");
  CHECK(error({{"host_dispatch_per_param_ns", {{"cast_params", 2000000000000}}}}) ==
        "hardware 'hw.json': op_level.host_dispatch_per_param_ns.cast_params = 2000000000000 is "
        "out of range [0, 1000000000000]");
  CHECK(error({{"host_dispatch_ns", {{"linear", 2.5}}}}) ==
        "hw.json: hardware key 'op_level.host_dispatch_ns.linear' must be an integer, got 2.5");
  CHECK(error({{"host_dispatch_ns", {{"forward", 5}}}})
            .find("hardware key 'op_level.host_dispatch_ns.forward': 'forward' is neither an op "
                  "type") != std::string::npos);
  CHECK(error({{"host_dispatch_ns", 5}}) ==
        "hw.json: hardware key 'op_level.host_dispatch_ns' must be an object");
}

TEST_CASE("GH100 presets carry the host dispatch figures of the FSDP2 B=8 profile, A100 none",
          "[sim][hw][op_level]") {
  const sim::HardwareModel h200 = sim::hardware_preset("h200-sxm");
  CHECK(h200.op_level.host_dispatch_ns_of("linear", true, 1) == 54'800);
  CHECK(h200.op_level.host_dispatch_ns_of("gelu", true, 1) == 23'700);
  CHECK(h200.op_level.host_dispatch_ns_of("linear.backward", false, 1) == 0);
  // A GPT-2 block's copy-in, 12 parameters: 357.9 + 12 x 28.7 = 702.3 us.
  CHECK(h200.op_level.host_dispatch_ns_of("cast_params", false, 12) == 702'300);
  CHECK(sim::hardware_preset("h100-sxm").op_level.host_dispatch_ns ==
        h200.op_level.host_dispatch_ns);
  CHECK(sim::hardware_preset("a100-sxm").op_level.host_dispatch_ns.empty());
  CHECK(sim::hardware_preset("a100-sxm").op_level.host_dispatch_per_param_ns.empty());
}

TEST_CASE("a calibration that fits the launch overhead drops the base's host dispatch",
          "[sim][calibrate][op_level]") {
  // Three linear ops launched 100 ns apart on a host lane (correlation 1..3):
  // the launch overhead fits 100 ns, which already holds the host's work, so
  // h200-sxm's per-op host dispatch is not kept on top of it.
  traces::Trace t;
  t.meta.source = traces::Source::kineto;
  traces::RankTrace& r = t.add_rank(0);
  const uint32_t host = t.add_lane(r, "host", traces::LaneKind::host);
  const uint32_t compute = t.add_lane(r, "compute", traces::LaneKind::compute);
  for (uint32_t i = 0; i < 3; ++i) {
    traces::Event& h = traces::add_event(r, host, t.intern("cudaLaunchKernel"),
                                         traces::Category::host, 100 * i, 10);
    h.correlation = i + 1;
    traces::Event& e = traces::add_event(r, compute, t.intern("fc.forward"),
                                         traces::Category::compute, 1000 * (i + 1), 1000);
    e.correlation = i + 1;
    e.op = t.intern("linear");
    e.flops = 1000000;
  }
  sim::CalibrationOptions o;
  o.base = sim::hardware_preset("h200-sxm");
  o.group_size = 1;
  const sim::CalibrationResult res = sim::calibrate({{"launches", &t}}, {}, o);
  INFO(sim::format_calibration_report(res.report));
  CHECK(res.report.launch.fitted);
  CHECK(res.hw.launch_overhead_ns == 100);
  CHECK(res.hw.op_level.host_dispatch_ns.empty());
  CHECK(res.hw.op_level.host_dispatch_per_param_ns.empty());
  CHECK_THAT(sim::format_calibration_report(res.report),
             Catch::Contains("the fitted launch overhead replaces the base's op_level"));
  // The rest of the base's op-level model stays (the GEMM shape terms go
  // with the linear fit, as the report notes).
  CHECK(res.hw.op_level.upcast_bytes);
  CHECK(res.hw.op_level.memory_efficiency_of("gelu") == 0.73);
}
