// Attention by the SDPA kernel PyTorch runs (OpLevelModel::attention_efficiency
// and math_attention, sim/hardware_op_level.h): exact times on the toy graph
// (its op 1 made an attention op) and the unit hardware (1 FLOP = 1 ns, 1 B =
// 1 ns); the schedule recording the kernel; the GH100 figures against the
// H200 profiles; the JSON keys and their errors.
#include <catch2/catch.hpp>

#include <string>

#include "plan/models.h"
#include "plan/schedule.h"
#include "sim/calibrate.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"
#include "tests/plan/toy_graph.h"
#include "tests/sim/sim_fixtures.h"
#include "traces/trace.h"

using namespace shardscope;
using nlohmann::json;
using plan::SdpaKernel;
using sim::TimeNs;

namespace {

// Toy graph op 1 as an attention op of H = 2 heads of D = 4 at (B, T) =
// (1, 4): the plan's FLOPs 100 B T^2 = 1600 forward, 250 B T^2 = 4000
// backward; no bytes. Schedule op 0 its forward, op 1 its backward, in
// `dtype`, the kernel recorded for graph op 1.
struct ToyAttention {
  plan::Graph g = test::toy_graph();
  plan::Schedule s;
  ToyAttention(SdpaKernel kernel, plan::DType dtype) {
    plan::Op& op = g.ops[1];
    op.type = plan::OpType::attention;
    op.attrs.n_head = 2;
    op.attrs.head_dim = 4;
    op.fwd_flops = plan::Poly::term(100, 1, 2);
    op.bwd_flops = plan::Poly::term(250, 1, 2);
    op.fwd_bytes = plan::Poly();
    op.bwd_bytes = plan::Poly();
    s.workload = plan::Workload{1, 4};
    s.streams = {"host", "compute"};
    s.stream_roles = {plan::StreamRole::host, plan::StreamRole::compute};
    s.attention_kernels.assign(g.ops.size(), SdpaKernel::none);
    s.attention_kernels[1] = kernel;
    plan::ScheduleOp fwd;
    fwd.kind = plan::OpKind::forward;
    fwd.stream = 1;
    fwd.graph_op = 1;
    fwd.dtype = dtype;
    plan::ScheduleOp bwd = fwd;
    bwd.kind = plan::OpKind::backward;
    s.ops = {fwd, bwd};
  }
};

TimeNs ns(const sim::HardwareModel& hw, const ToyAttention& t, int op) {
  return sim::CostModel(hw, t.g, t.s).duration(op);
}

}  // namespace

TEST_CASE("a fused SDPA kernel runs at its (kernel, head_dim, direction) fraction of peak",
          "[sim][cost][op_level][attention]") {
  sim::HardwareModel hw = test::unit_hardware();
  const ToyAttention cudnn(SdpaKernel::cudnn, plan::DType::bf16);
  // Without entries: the plan's FLOPs at the efficiency (1.0).
  CHECK(ns(hw, cudnn, 0) == TimeNs(1600));
  CHECK(ns(hw, cudnn, 1) == TimeNs(4000));
  hw.op_level.attention_efficiency = {{"cudnn.hd4", 0.5}, {"cudnn.hd4.backward", 0.25}};
  CHECK(ns(hw, cudnn, 0) == TimeNs(3200));   // 1600 / 0.5
  CHECK(ns(hw, cudnn, 1) == TimeNs(16000));  // 4000 / 0.25
  // The sustained clock multiplies the peak as for every compute op.
  hw.op_level.sustained_clock_fraction = 0.5;
  CHECK(ns(hw, cudnn, 0) == TimeNs(6400));
  hw.op_level.sustained_clock_fraction = 1.0;
  // Another kernel, another head_dim: no entry, the efficiency again.
  CHECK(ns(hw, ToyAttention(SdpaKernel::flash, plan::DType::bf16), 0) == TimeNs(1600));
  ToyAttention hd8(SdpaKernel::cudnn, plan::DType::bf16);
  hd8.g.ops[1].attrs.head_dim = 8;
  CHECK(ns(hw, hd8, 0) == TimeNs(1600));
  // A backward entry is not taken from the forward's.
  hw.op_level.attention_efficiency.erase("cudnn.hd4.backward");
  CHECK(ns(hw, cudnn, 1) == TimeNs(4000));
  // The roofline still holds: 8000 B at 1 B/ns outlast 3200 ns of compute.
  ToyAttention bytes(SdpaKernel::cudnn, plan::DType::bf16);
  bytes.g.ops[1].fwd_bytes = plan::Poly::term(1000, 1, 1);  // 4000 fp32 B, 2 x as bf16: 2000
  CHECK(ns(hw, bytes, 0) == TimeNs(3200));
  bytes.g.ops[1].fwd_bytes = plan::Poly::term(4000, 1, 1);  // 16000 fp32 B: 8000 bf16 B
  CHECK(ns(hw, bytes, 0) == TimeNs(8000));
  // A schedule that records no kernel (not built by build_schedule): the efficiency.
  ToyAttention none(SdpaKernel::cudnn, plan::DType::bf16);
  none.s.attention_kernels.clear();
  CHECK(ns(hw, none, 0) == TimeNs(1600));
}

TEST_CASE("the math SDPA kernel costs its fp32 GEMMs plus its T x T passes",
          "[sim][cost][op_level][attention]") {
  sim::HardwareModel hw = test::unit_hardware();
  hw.peak_flops_bf16 = 2e9;  // bf16 twice as fast: the math GEMMs still run at fp32's peak
  hw.efficiency = {{"default", 1.0}, {"linear", 0.5}};
  const ToyAttention math(SdpaKernel::math, plan::DType::bf16);
  // Off: a fused kernel's cost, 1600 FLOPs at the bf16 peak.
  CHECK(ns(hw, math, 0) == TimeNs(800));
  hw.op_level.math_attention = true;
  // B H T^2 = 32 scores. Forward: 2 bmms of 2 x 32 x 4 = 256 FLOPs at fp32
  // 1 FLOP/ns x linear's 0.5: 1024 ns; 6 passes of 32 fp32 scores, 768 B:
  // 768 ns. 1792 ns.
  CHECK(ns(hw, math, 0) == TimeNs(1792));
  // Backward: 4 bmms, 2048 ns; 7 passes, 896 B: 2944 ns.
  CHECK(ns(hw, math, 1) == TimeNs(2944));
  // The passes at attention's fraction of HBM bandwidth (backward falls back).
  hw.op_level.memory_efficiency = {{"attention", 0.5}};
  CHECK(ns(hw, math, 0) == TimeNs(1024 + 1536));
  CHECK(ns(hw, math, 1) == TimeNs(2048 + 1792));
  // Fused fractions do not apply to math.
  hw.op_level.attention_efficiency = {{"cudnn.hd4", 0.1}};
  CHECK(ns(hw, math, 0) == TimeNs(1024 + 1536));
}

TEST_CASE("build_schedule records the SDPA kernel of each attention op", "[sim][plan][attention]") {
  const plan::Graph graph = plan::load_model("gpt2-tiny");
  const auto kernels = [&](const std::string& dtype) {
    plan::Policy policy = plan::policy_from_json(
        {{"mixed_precision", {{"param_dtype", dtype}}}, {"batch_size", 2}, {"seq_len", 64}});
    policy.device = plan::DeviceFamily{true, 90};
    const plan::World world = plan::validate_policy(policy, graph, 1);
    const plan::UnitPlan units = plan::build_units(graph, policy, world);
    return plan::build_schedule(graph, policy, units, 0).attention_kernels;
  };
  // bf16 on sm_90: cuDNN first; fp32: flash and cuDNN refuse the dtype,
  // memory-efficient runs.
  for (const auto& [dtype, kernel] :
       {std::pair<std::string, SdpaKernel>{"bf16", SdpaKernel::cudnn},
        std::pair<std::string, SdpaKernel>{"fp32", SdpaKernel::efficient}}) {
    const std::vector<SdpaKernel> k = kernels(dtype);
    REQUIRE(k.size() == graph.ops.size());
    int attention = 0;
    for (size_t o = 0; o < graph.ops.size(); ++o) {
      const bool is_attention = graph.ops[o].type == plan::OpType::attention;
      attention += is_attention;
      CHECK(k[o] == (is_attention ? kernel : SdpaKernel::none));
    }
    CHECK(attention == 2);  // gpt2-tiny's two blocks
  }
}

TEST_CASE("h200-sxm: GPT-2's cuDNN attention at head_dim 64 against the H200 profiles",
          "[sim][op_level][attention][h200]") {
  // Per layer, the profiles' cuDNN kernels (tests/recorded/h200, means over
  // 36 layers of 3 steps): eager B = 48 forward 230.41 us, backward 767.92
  // us (the figures the preset was read from: the arithmetic, not a check);
  // FSDP2 B = 8 forward 46.55 us, backward 145.06 us (not used: a check,
  // -17% and -12% at this smaller batch; the curve gave about +190%).
  const sim::HardwareModel hw = sim::hardware_preset("h200-sxm");
  const plan::Graph graph = plan::load_model("gpt2-small");
  for (const int64_t batch : {48, 8}) {
    plan::Policy policy = plan::policy_from_json(
        {{"mixed_precision", {{"param_dtype", "bf16"}}}, {"batch_size", batch}, {"seq_len", 1024}});
    policy.device = hw.device;
    const plan::World world = plan::validate_policy(policy, graph, 1);
    const plan::UnitPlan units = plan::build_units(graph, policy, world);
    const plan::Schedule s = plan::build_schedule(graph, policy, units, 0);
    const sim::CostModel cost(hw, graph, s);
    double fwd_us = 0, bwd_us = 0;
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const plan::ScheduleOp& op = s.ops[i];
      if (op.graph_op < 0 ||
          graph.ops[static_cast<size_t>(op.graph_op)].type != plan::OpType::attention)
        continue;
      const double us = static_cast<double>(cost.duration(static_cast<int>(i)).ns) / 1e3;
      (op.kind == plan::OpKind::backward ? bwd_us : fwd_us) = us;
    }
    INFO("B = " << batch << ": forward " << fwd_us << " us, backward " << bwd_us << " us");
    if (batch == 48) {
      CHECK(fwd_us == Approx(230.41).epsilon(0.001));
      CHECK(bwd_us == Approx(767.92).epsilon(0.001));
    } else {
      CHECK(fwd_us == Approx(46.55 * 0.825).epsilon(0.01));   // B = 48's rate: 38.4 us
      CHECK(bwd_us == Approx(145.06 * 0.882).epsilon(0.01));  // 128.0 us
    }
  }
}

TEST_CASE("op_level attention keys: JSON round trip and errors naming key and value",
          "[sim][hw][op_level][attention]") {
  const json doc = {
      {"base", "a100-sxm"},
      {"op_level",
       {{"attention_efficiency", {{"flash.hd128", 0.6}, {"cudnn.hd64.backward", 0.4}}},
        {"math_attention", true}}}};
  const sim::HardwareModel h = sim::hardware_from_json(doc, "mine.json");
  CHECK(h.op_level.attention_efficiency_of(SdpaKernel::flash, 128, false) == 0.6);
  CHECK(h.op_level.attention_efficiency_of(SdpaKernel::flash, 128, true) == 0);
  CHECK(h.op_level.attention_efficiency_of(SdpaKernel::cudnn, 64, true) == 0.4);
  CHECK(h.op_level.math_attention);
  CHECK(!h.op_level.is_default());
  const json out = sim::hardware_to_json(h)["op_level"];
  CHECK(out["attention_efficiency"]["flash.hd128"] == 0.6);
  CHECK(out["math_attention"] == true);
  CHECK(sim::hardware_from_json(sim::hardware_to_json(h), "again").op_level.attention_efficiency ==
        h.op_level.attention_efficiency);
  // The map replaces the base's as a whole: {} clears the preset's entries.
  CHECK(!sim::hardware_preset("h200-sxm").op_level.attention_efficiency.empty());
  CHECK(sim::hardware_from_json(
            {{"base", "h200-sxm"}, {"op_level", {{"attention_efficiency", json::object()}}}},
            "off.json")
            .op_level.attention_efficiency.empty());

  const auto error = [](const json& op_level) {
    try {
      sim::hardware_from_json(json{{"op_level", op_level}}, "hw.json");
    } catch (const sim::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(
      error({{"attention_efficiency", {{"cudnn.hd64", 1.5}}}}) ==
      "hardware 'hw.json': op_level.attention_efficiency.cudnn.hd64 = 1.5 is out of range (0, 1]");
  for (const char* bad : {"math.hd64", "cudnn.hd064", "cudnn", "cudnn.hd", "cudnn.hd64.fwd"})
    CHECK(error({{"attention_efficiency", {{bad, 0.5}}}})
              .find(std::string("hardware key 'op_level.attention_efficiency.") + bad + "': '" +
                    bad + "' is not '<kernel>.hd<head_dim>'") != std::string::npos);
  CHECK(error({{"math_attention", 1}}) ==
        "hw.json: hardware key 'op_level.math_attention' must be true or false, got 1");
  CHECK(error({{"attention_efficiency", {{"flash.hd64", "fast"}}}}) ==
        "hw.json: hardware key 'op_level.attention_efficiency.flash.hd64' must be a number, got "
        "\"fast\"");
}

TEST_CASE("a calibration that fits attention drops the base's per-kernel fractions",
          "[sim][calibrate][op_level][attention]") {
  // Three compute-bound attention forwards of 1e6 FLOPs in 1000 ns each: the
  // fit holds the kernel's rate, so h200-sxm's cudnn.hd64 fractions (which
  // would take precedence for cuDNN ops) are not kept; the backward takes
  // the forward's fit, so its fraction goes too.
  traces::Trace t;
  t.meta.source = traces::Source::kineto;
  traces::RankTrace& r = t.add_rank(0);
  const uint32_t compute = t.add_lane(r, "compute", traces::LaneKind::compute);
  for (int64_t i = 0; i < 3; ++i) {
    traces::Event& e = traces::add_event(r, compute, t.intern("attn.forward"),
                                         traces::Category::compute, 2000 * (i + 1), 1000);
    e.op = t.intern("attention");
    e.flops = 1000000;
  }
  sim::CalibrationOptions o;
  o.base = sim::hardware_preset("h200-sxm");
  o.group_size = 1;
  REQUIRE(o.base.op_level.attention_efficiency.size() == 2);
  const sim::CalibrationResult res = sim::calibrate({{"attention", &t}}, {}, o);
  INFO(sim::format_calibration_report(res.report));
  CHECK(res.hw.op_level.attention_efficiency.empty());
  CHECK_THAT(sim::format_calibration_report(res.report),
             Catch::Contains("attention fitted: the base's per-kernel attention fractions"));
  // The math kernel's model is not a fraction: it stays.
  CHECK(res.hw.op_level.math_attention);
}
