// Simulating exported graphs (docs/models.md, "Exported graphs"): the peak of
// the hand-made fixture tests/data/exported/tiny-mlp.graph.json computed by
// hand, the BLAS workspace of aten gemm ops, the cost of each aten kind, and
// a sweep over the fixture.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "plan/models.h"
#include "plan/policy.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"
#include "sim/simulator.h"
#include "sim/sweep.h"
#include "tests/sim/sim_fixtures.h"

using namespace shardscope;
using nlohmann::json;

namespace {

plan::Graph tiny_mlp() {
  return plan::load_model(std::string(SHARDSCOPE_SOURCE_DIR) +
                          "/tests/data/exported/tiny-mlp.graph.json");
}

sim::SimResult simulate(const plan::Graph& g, const json& policy_doc, int64_t world,
                        const sim::HardwareModel& hw) {
  const plan::Policy p = plan::policy_from_json(policy_doc);
  const plan::UnitPlan up = plan::build_units(g, p, plan::validate_policy(p, g, world));
  sim::SimOptions so;
  so.record_trace = false;
  return sim::simulate(g, up, plan::build_schedule(g, p, up, 0), hw, so);
}

// The root as the only unit, one rank, B = 1024, fp32.
const json kRootOnly = {{"wrap", {{"type", "modules"}, {"modules", {""}}}}, {"batch_size", 1024}};

// Peak allocated of kRootOnly on cpu-local, by hand. Tensors at B = 1024 (fp32):
// x [B,16] 64 KiB; the four [B,32] tensors (addmm, relu, mm, relu) and their
// gradients 128 KiB each; the [B,10] ones 40 KiB. Persistent: the fp32 shard
// of the 1,888 parameters (7,552 B -> a 7,680 B block) and AdamW's two states
// (15,104 B -> 15,360 B). The peak is the backward of layers.1.relu: live are
// x, both relu outputs (saved), the gradient of layers.1.relu (its input),
// the new gradient of layers.1.fc.mm and the step's gradient shard (7,680 B);
// labels and the [B,10] tensors are gone. Peak = 64 B + 4 x 128 B (bytes,
// B = 1024) + 7,680 (grad shard) + 7,680 (param shard) + 15,360 (states)
// = 620,544 bytes.
constexpr int64_t kRootOnlyPeak = 576 * 1024 + 7680 + 7680 + 15360;

}  // namespace

TEST_CASE("exported graph: simulated peak of the tiny MLP equals the hand count",
          "[sim][exported]") {
  const plan::Graph g = tiny_mlp();
  const sim::SimResult r = simulate(g, kRootOnly, 1, sim::hardware_preset("cpu-local"));
  CHECK(r.fits);
  CHECK(r.peak_allocated_bytes == kRootOnlyPeak);
  CHECK(r.blas_workspace_bytes == 0);  // cpu-local has no cuBLAS workspace
  // A module buffer of 1,024 fp32 elements (4 KiB) is resident throughout:
  // the peak grows by exactly its block.
  plan::Graph with_buffer = g;
  with_buffer.tensors.push_back(plan::Tensor{"table", {plan::Poly::constant(1024)}});
  with_buffer.tensors.back().requires_grad = false;
  with_buffer.buffers = {10};
  with_buffer.ops[3].inputs = {4, 10};
  with_buffer.validate();
  const sim::SimResult b = simulate(with_buffer, kRootOnly, 1, sim::hardware_preset("cpu-local"));
  CHECK(b.peak_allocated_bytes == kRootOnlyPeak + 4096);
}

TEST_CASE("an aten gemm op takes the cuBLAS workspaces like a linear op", "[sim][exported]") {
  // h100-sxm: 2 workspaces of 32 MiB, one at the first forward GEMM, the
  // other at the first backward one; outside peak allocated.
  const sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  REQUIRE(hw.blas_workspace_bytes == 32 << 20);
  REQUIRE(hw.blas_workspaces == 2);
  plan::Graph g = tiny_mlp();
  const sim::SimResult with_gemm = simulate(g, kRootOnly, 1, hw);
  CHECK(with_gemm.blas_workspace_bytes == 2 * (32 << 20));
  CHECK(with_gemm.peak_allocated_bytes == kRootOnlyPeak);
  // The same ops as kind memory: no GEMM, no workspace.
  for (plan::Op& op : g.ops) op.attrs.kind = "memory";
  const sim::SimResult without = simulate(g, kRootOnly, 1, hw);
  CHECK(without.blas_workspace_bytes == 0);
  CHECK(without.peak_allocated_bytes == kRootOnlyPeak);
}

TEST_CASE("an aten op is costed by its kind: gemm as linear, attention, memory",
          "[sim][exported][cost]") {
  // layers.1.fc.mm at B = 1024: 2048 B = 2,097,152 forward FLOPs and
  // 256 B + 4096 = 266,240 bytes. On the unit hardware (1 FLOP/ns, 1 B/ns)
  // with efficiencies linear 0.5, attention 0.25, aten 0.125 the op is
  // compute-bound: 4,194,304 ns as gemm, 8,388,608 ns as attention,
  // 16,777,216 ns as memory. Its backward (4096 B FLOPs) under
  // "linear.backward" 0.25: 16,777,216 ns.
  plan::Graph g = tiny_mlp();
  plan::Schedule s;
  s.workload = plan::Workload{1024, 1};
  s.streams = {"host", "compute"};
  s.stream_roles = {plan::StreamRole::host, plan::StreamRole::compute};
  plan::ScheduleOp fwd;
  fwd.kind = plan::OpKind::forward;
  fwd.stream = 1;
  fwd.graph_op = 2;
  plan::ScheduleOp bwd = fwd;
  bwd.kind = plan::OpKind::backward;
  s.ops = {fwd, bwd};
  sim::HardwareModel hw = test::unit_hardware();
  hw.efficiency = {{"default", 1.0},
                   {"linear", 0.5},
                   {"linear.backward", 0.25},
                   {"attention", 0.25},
                   {"aten", 0.125}};
  const auto forward_ns = [&](const char* kind) {
    g.ops[2].attrs.kind = kind;
    sim::CostModel cost(hw, g, s);
    return cost.duration(0).ns;
  };
  CHECK(forward_ns("gemm") == 4194304);
  CHECK(forward_ns("attention") == 8388608);
  CHECK(forward_ns("memory") == 16777216);
  g.ops[2].attrs.kind = "gemm";
  CHECK(sim::CostModel(hw, g, s).duration(1).ns == 16777216);
  // Memory-bound when the bytes dominate: 1e9 bytes at 1 B/ns = 1 s.
  g.ops[2].fwd_bytes = plan::Poly::constant(1'000'000'000);
  g.ops[2].attrs.kind = "memory";
  CHECK(sim::CostModel(hw, g, s).duration(0).ns == 1'000'000'000);
}

TEST_CASE("sweep on an exported graph simulates every configuration", "[sim][exported]") {
  const plan::Graph g = tiny_mlp();
  // Axes in key order, the last varying fastest: activation_checkpointing
  // (none, full) x wrap (the root alone; type none: the graph's default
  // MLPLayer blocks). Full with the root alone has no block to checkpoint:
  // rejected.
  const sim::SweepGrid grid =
      sim::grid_from_json({{"wrap", {{{"type", "modules"}, {"modules", {""}}}, {{"type", "none"}}}},
                           {"activation_checkpointing", {"none", "full"}},
                           {"batch_size", {1024}}});
  sim::SweepOptions o;
  o.worlds = {1};
  o.threads = 1;
  const sim::SweepResult r = sim::run_sweep(g, grid, sim::hardware_preset("cpu-local"), o);
  REQUIRE(r.points.size() == 4);
  CHECK(r.rejected == 1);
  CHECK(r.points[2].rejected);
  CHECK_THAT(r.points[2].reason, Catch::Contains("activation_checkpointing"));
  CHECK(r.points[0].metrics.peak_allocated_bytes == kRootOnlyPeak);
  CHECK(r.points[1].fits);
  CHECK(r.points[3].fits);
  // Checkpointing both blocks runs their forward again in backward.
  CHECK(r.points[3].metrics.compute_ms > r.points[1].metrics.compute_ms);
  CHECK(r.best >= 0);
}
