// The op-level cost terms (sim/hardware_op_level.h): sustained clock, GEMM
// shape (unaligned dimensions, wave quantization), per-op-type fractions of
// HBM bandwidth; their JSON keys and errors. Exact times on the toy graph.
#include <catch2/catch.hpp>

#include <string>

#include "sim/cost_model.h"
#include "sim/hardware.h"
#include "tests/plan/toy_graph.h"
#include "tests/sim/sim_fixtures.h"

using namespace shardscope;
using nlohmann::json;

namespace {

// Toy graph op 1 (blocks.0.fc): a 4 x 4 linear, fwd 32 B T FLOPs, bwd 64 B T
// (2 M in out and twice that, M = B T rows), on the unit hardware (1 FLOP/ns,
// 1 B/ns). Schedule op 0 its forward, op 1 its backward, at (B, T) = (1, t).
struct ToyLinear {
  plan::Graph g = test::toy_graph();
  plan::Schedule s;
  explicit ToyLinear(int64_t t, plan::DType dtype = plan::DType::f32) {
    g.ops[1].attrs.in_features = 4;
    g.ops[1].attrs.out_features = 4;
    s.workload = plan::Workload{1, t};
    s.streams = {"host", "compute"};
    s.stream_roles = {plan::StreamRole::host, plan::StreamRole::compute};
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

sim::TimeNs fwd_ns(const sim::HardwareModel& hw, const ToyLinear& t) {
  return sim::CostModel(hw, t.g, t.s).duration(0);
}
sim::TimeNs bwd_ns(const sim::HardwareModel& hw, const ToyLinear& t) {
  return sim::CostModel(hw, t.g, t.s).duration(1);
}

}  // namespace

TEST_CASE("a sustained clock fraction scales every compute peak", "[sim][cost][op_level]") {
  const ToyLinear toy(4);
  sim::HardwareModel hw = test::unit_hardware();
  CHECK(fwd_ns(hw, toy) == sim::TimeNs(128));  // 128 FLOPs at 1 FLOP/ns
  hw.op_level.sustained_clock_fraction = 0.5;
  CHECK(fwd_ns(hw, toy) == sim::TimeNs(256));
  CHECK(bwd_ns(hw, toy) == sim::TimeNs(512));
}

TEST_CASE("a 16-bit GEMM with a dimension off the alignment runs at the unaligned fraction",
          "[sim][cost][op_level]") {
  const ToyLinear bf16(4, plan::DType::bf16);
  sim::HardwareModel hw = test::unit_hardware();
  hw.op_level.gemm.alignment_elements = 8;  // 4 features: unaligned
  hw.op_level.gemm.unaligned_efficiency = 0.25;
  hw.op_level.gemm.unaligned_efficiency_backward = 0.5;
  // 128 / (1 x 0.25) and 256 / (1 x 0.5), whatever the efficiency map says.
  hw.efficiency = {{"linear", 0.8}};
  CHECK(fwd_ns(hw, bf16) == sim::TimeNs(512));
  CHECK(bwd_ns(hw, bf16) == sim::TimeNs(512));
  // fp32 GEMMs do not take the 16-bit fallback: 128 / 0.8 = 160.
  CHECK(fwd_ns(hw, ToyLinear(4)) == sim::TimeNs(160));
  // Aligned at 4 elements: the efficiency map again.
  hw.op_level.gemm.alignment_elements = 4;
  CHECK(fwd_ns(hw, bf16) == sim::TimeNs(160));
}

TEST_CASE("wave quantization: tiles over SMs, relative to the square GEMM of the same FLOPs",
          "[sim][cost][op_level]") {
  // T = 8: M = 8 rows, fwd 256 FLOPs, bwd 512. Tiles 2 x 2 over 3 SMs.
  // Forward output 8 x 4: 8 tiles, 3 waves of 3 slots: 8/9. The square GEMM
  // of 256 FLOPs has side (256/2)^(1/3) = 5.04: 3 x 3 = 9 tiles, 9/9 = 1.
  // Forward = 256 / (8/9) = 288 ns. Backward, 256 FLOPs each: the input
  // gradient (8 x 4, 8/9) 288 ns and the weight gradient (4 x 4: 4 tiles,
  // 2 waves, 4/6) 384 ns: 672 ns.
  const ToyLinear toy(8);
  sim::HardwareModel hw = test::unit_hardware();
  CHECK(fwd_ns(hw, toy) == sim::TimeNs(256));
  CHECK(bwd_ns(hw, toy) == sim::TimeNs(512));
  hw.op_level.gemm.sm_count = 3;
  hw.op_level.gemm.tile_m = 2;
  hw.op_level.gemm.tile_n = 2;
  CHECK(fwd_ns(hw, toy) == sim::TimeNs(288));
  CHECK(bwd_ns(hw, toy) == sim::TimeNs(672));
  CHECK(sim::gemm_wave_efficiency(hw.op_level.gemm, 8, 4) == Approx(8.0 / 9));
  CHECK(sim::gemm_wave_efficiency(hw.op_level.gemm, 6, 6) == 1.0);
}

TEST_CASE("memory-bound graph ops move their bytes at the op type's fraction of HBM bandwidth",
          "[sim][cost][op_level]") {
  ToyLinear toy(4);
  toy.g.ops[1].fwd_bytes = plan::Poly::term(100, 1, 1);  // 400 B at T = 4: 400 ns
  toy.g.ops[1].bwd_bytes = plan::Poly::term(200, 1, 1);  // 800 ns
  sim::HardwareModel hw = test::unit_hardware();
  CHECK(fwd_ns(hw, toy) == sim::TimeNs(400));
  hw.op_level.memory_efficiency = {{"linear", 0.5}};
  CHECK(fwd_ns(hw, toy) == sim::TimeNs(800));
  CHECK(bwd_ns(hw, toy) == sim::TimeNs(1600));  // linear.backward falls back to linear
  hw.op_level.memory_efficiency["linear.backward"] = 0.25;
  CHECK(bwd_ns(hw, toy) == sim::TimeNs(3200));
  CHECK(fwd_ns(hw, toy) == sim::TimeNs(800));
}

TEST_CASE("op_level JSON round-trips and bad entries are errors naming key and value",
          "[sim][hw][op_level]") {
  const json doc = {{"base", "a100-sxm"},
                    {"op_level",
                     {{"sustained_clock_fraction", 0.9},
                      {"gemm", {{"sm_count", 108}, {"unaligned_efficiency", 0.2}}},
                      {"memory_efficiency", {{"gelu", 0.7}}}}}};
  const sim::HardwareModel h = sim::hardware_from_json(doc, "mine.json");
  CHECK(h.op_level.sustained_clock_fraction == 0.9);
  CHECK(h.op_level.gemm.sm_count == 108);
  CHECK(h.op_level.gemm.tile_m == 128);  // default kept
  CHECK(h.op_level.memory_efficiency_of("gelu.backward") == 0.7);
  CHECK(h.op_level.memory_efficiency_of("layernorm") == 1.0);
  CHECK(sim::hardware_to_json(h)["op_level"]["gemm"]["sm_count"] == 108);

  const auto error = [](const json& op_level) {
    try {
      sim::hardware_from_json(json{{"op_level", op_level}}, "hw.json");
    } catch (const sim::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error({{"sustained_clock_fraction", 1.5}}) ==
        "hardware 'hw.json': op_level.sustained_clock_fraction = 1.5 is out of range (0, 1]");
  CHECK(error({{"gemm", {{"tile_k", 64}}}}) ==
        "hw.json: unknown hardware key 'op_level.gemm.tile_k' (sm_count, tile_m, tile_n, "
        "alignment_elements, unaligned_efficiency, unaligned_efficiency_backward)");
  CHECK(error({{"gemm", {{"sm_count", -1}}}}) ==
        "hardware 'hw.json': op_level.gemm.sm_count = -1 is out of range [0, 1048576]");
  CHECK(error({{"gemm", {{"tile_m", 2.5}}}}) ==
        "hw.json: hardware key 'op_level.gemm.tile_m' must be an integer, got 2.5");
  CHECK(error({{"memory_efficiency", {{"gelu", 0}}}}) ==
        "hardware 'hw.json': op_level.memory_efficiency.gelu = 0 is out of range (0, 1]");
  CHECK(
      error({{"memory_efficiency", {{"softmax", 0.5}}}})
          .find("hardware key 'op_level.memory_efficiency.softmax': 'softmax' is not an op type") !=
      std::string::npos);
  CHECK(error({{"clock", 1}}).find("unknown hardware key 'op_level.clock'") != std::string::npos);
}

TEST_CASE("Hopper presets carry the GH100 op-level figures, A100 keeps none",
          "[sim][hw][op_level]") {
  const sim::HardwareModel h200 = sim::hardware_preset("h200-sxm");
  const sim::HardwareModel h100 = sim::hardware_preset("h100-sxm");
  const sim::HardwareModel pcie = sim::hardware_preset("h100-pcie");
  CHECK(sim::op_level_to_json(h100.op_level) == sim::op_level_to_json(h200.op_level));
  CHECK(h200.op_level.gemm.sm_count == 132);
  CHECK(pcie.op_level.gemm.sm_count == 114);
  CHECK(pcie.hbm_bytes_per_s == 2.0e12);
  CHECK(pcie.peak_flops_bf16 == 756e12);
  CHECK(h200.contention_factor == 1.189);
  CHECK(sim::hardware_preset("a100-sxm").op_level.is_default());
  CHECK(sim::hardware_preset("a100-sxm").contention_factor == 1.1);
  CHECK(sim::hardware_preset("cpu-local").op_level.is_default());
}

TEST_CASE("below fp32, upcast bytes add the fp32 tensors' and upcast temporaries' bytes",
          "[sim][cost][op_level]") {
  // blocks.0.fc's output x1 ([B, T, 4] = 16 elements at T = 4) made fp32,
  // and a forward temporary of B T = 4 elements that is fp32 below fp32
  // (Hugging Face's logits.float()). In bf16: x1 costs 4 - 2 = 2 bytes more
  // per element (32 B), the temporary 4 bytes written and read (32 B): 64 B,
  // 64 ns at 1 B/ns (the 128 FLOPs take 0.128 ns at 1e12 FLOP/s).
  ToyLinear bf16(4, plan::DType::bf16);
  bf16.g.tensors[static_cast<size_t>(bf16.g.ops[1].outputs[0])].precision = plan::Precision::fp32;
  bf16.g.ops[1].fwd_temps = {plan::Temp{plan::Poly::term(1, 1, 1), plan::Precision::fp32_if_lowp}};
  sim::HardwareModel hw = test::unit_hardware();
  hw.peak_flops_bf16 = hw.peak_flops_fp32 = 1e12;
  CHECK(sim::CostModel(hw, bf16.g, bf16.s).bytes(0) == 0.0);
  CHECK(fwd_ns(hw, bf16) == sim::TimeNs(0));
  hw.op_level.upcast_bytes = true;
  CHECK(sim::CostModel(hw, bf16.g, bf16.s).bytes(0) == 64.0);
  CHECK(fwd_ns(hw, bf16) == sim::TimeNs(64));
  // fp32 compute: nothing is upcast.
  ToyLinear fp32(4);
  fp32.g = bf16.g;
  CHECK(sim::CostModel(hw, fp32.g, fp32.s).bytes(0) == 0.0);
}
