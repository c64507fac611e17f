// Exact simulated times on schedules small enough to work out by hand (unit
// hardware of sim_fixtures.h: 1 byte of HBM traffic = 1 ns, a 2-rank ring
// moves S bytes in S/2 ns).
#include <catch2/catch.hpp>

#include "plan/graph.h"
#include "plan/units.h"
#include "sim/simulator.h"
#include "tests/sim/sim_fixtures.h"

using namespace shardscope;
using plan::OpKind;
using sim::TimeNs;
using test::ScheduleBuilder;

namespace {

sim::SimResult run(const plan::Schedule& s, const sim::HardwareModel& hw = test::unit_hardware(),
                   int64_t mem_limit = 0) {
  static const plan::Graph graph;
  static const plan::UnitPlan units = [] {
    plan::UnitPlan u;
    u.units.resize(1);
    u.units[0].name = "u0";
    return u;
  }();
  sim::SimOptions o;
  o.memory_limit_bytes = mem_limit;
  return sim::simulate(graph, units, s, hw, o);
}

}  // namespace

TEST_CASE("compute only: two ops on one stream run back to back", "[sim][exact]") {
  // op0 1000 B -> [0, 1000); op1 500 B -> [1000, 1500). Step 1500 ns.
  ScheduleBuilder b;
  int a = b.launch(OpKind::grad_scale, ScheduleBuilder::kCompute, 1000);
  int c = b.launch(OpKind::grad_scale, ScheduleBuilder::kCompute, 500);
  sim::SimResult r = run(b.s);
  CHECK(r.op_start[a] == TimeNs(0));
  CHECK(r.op_end[a] == TimeNs(1000));
  CHECK(r.op_start[c] == TimeNs(1000));
  CHECK(r.op_end[c] == TimeNs(1500));
  CHECK(r.step_time == TimeNs(1500));
  CHECK(r.metrics.total.step_time_ms == Approx(0.0015));
  CHECK(r.metrics.total.compute_ms == Approx(0.0015));
  CHECK(r.metrics.total.comm_ms == 0.0);
  CHECK(r.fits);
}

TEST_CASE("all-gather overlapping compute: the dependent op waits for it", "[sim][exact]") {
  // all-gather S = 2000 B over 2 ranks: 2000 x 1/2 = 1000 ns -> [0, 1000).
  // Independent compute 600 B -> [0, 600); dependent compute 300 B waits for
  // the all-gather -> [1000, 1300). Step 1300 ns. Compute union 900 ns, comm
  // 1000 ns, overlap 600/1000, exposed 400 ns.
  ScheduleBuilder b;
  int ag = b.launch(OpKind::all_gather, ScheduleBuilder::kAllGather, 2000);
  int c0 = b.launch(OpKind::grad_scale, ScheduleBuilder::kCompute, 600);
  int c1 = b.launch(OpKind::grad_scale, ScheduleBuilder::kCompute, 300, {ag});
  sim::SimResult r = run(b.s);
  CHECK(r.op_end[ag] == TimeNs(1000));
  CHECK(r.op_end[c0] == TimeNs(600));
  CHECK(r.op_start[c1] == TimeNs(1000));
  CHECK(r.step_time == TimeNs(1300));
  const traces::MetricValues& m = r.metrics.total;
  CHECK(m.comm_ms == Approx(0.001));
  CHECK(m.compute_ms == Approx(0.0009));
  CHECK(m.overlap == Approx(0.6));
  CHECK(m.exposed_comm_ms == Approx(0.0004));
  // The wait across streams is a flow from the all-gather to the dependent op.
  REQUIRE(r.trace.ranks.size() == 1);
  CHECK(r.trace.ranks[0].flows.size() == 1);
  CHECK(r.trace.ranks[0].represents == std::vector<int32_t>{0, 1});
}

TEST_CASE("contention: compute starting during a collective is slowed by the factor",
          "[sim][exact]") {
  // Factor 1.5: the independent 600 ns op starts with the all-gather running
  // -> 900 ns. The dependent op starts at 1000 after it ended: 300 ns. Step 1300.
  ScheduleBuilder b;
  int ag = b.launch(OpKind::all_gather, ScheduleBuilder::kAllGather, 2000);
  int c0 = b.launch(OpKind::grad_scale, ScheduleBuilder::kCompute, 600);
  int c1 = b.launch(OpKind::grad_scale, ScheduleBuilder::kCompute, 300, {ag});
  sim::HardwareModel hw = test::unit_hardware();
  hw.contention_factor = 1.5;
  sim::SimResult r = run(b.s, hw);
  CHECK(r.op_end[c0] == TimeNs(900));
  CHECK(r.op_start[c1] == TimeNs(1000));
  CHECK(r.op_end[c1] == TimeNs(1300));
}

TEST_CASE("two collectives of one group serialize in seq order across streams", "[sim][exact]") {
  // all-gather 2000 B -> 1000 ns [0, 1000); reduce-scatter 4000 B on another
  // stream, same group -> 2000 ns, starts when the group is free: [1000, 3000).
  // With 100 ns latency each: [0, 1100) then [1100, 3200).
  ScheduleBuilder b;
  int ag = b.launch(OpKind::all_gather, ScheduleBuilder::kAllGather, 2000);
  int rs = b.launch(OpKind::reduce_scatter, ScheduleBuilder::kReduceScatter, 4000);
  sim::SimResult r = run(b.s);
  CHECK(r.op_start[ag] == TimeNs(0));
  CHECK(r.op_start[rs] == TimeNs(1000));
  CHECK(r.step_time == TimeNs(3000));
  sim::HardwareModel hw = test::unit_hardware();
  hw.collective_latency_ns = 100;
  sim::SimResult l = run(b.s, hw);
  CHECK(l.op_end[ag] == TimeNs(1100));
  CHECK(l.op_start[rs] == TimeNs(1100));
  CHECK(l.step_time == TimeNs(3200));
}

TEST_CASE("a collective launched first but with a later seq waits for the earlier one",
          "[sim][exact]") {
  // seq 1 (reduce-scatter, 4000 B) is launched before seq 0 (all-gather,
  // 2000 B): seq 0 runs [0, 1000), then seq 1 [1000, 3000).
  ScheduleBuilder b;
  int rs = b.op(OpKind::reduce_scatter, ScheduleBuilder::kReduceScatter, 4000);
  int ag = b.op(OpKind::all_gather, ScheduleBuilder::kAllGather, 2000);
  b.s.ops[rs].seq = 1;
  b.s.ops[ag].seq = 0;
  b.s.actions.push_back(plan::Action{plan::ActionKind::launch, rs, -1, {}});
  b.s.actions.push_back(plan::Action{plan::ActionKind::launch, ag, -1, {}});
  sim::SimResult r = run(b.s);
  CHECK(r.op_start[ag] == TimeNs(0));
  CHECK(r.op_start[rs] == TimeNs(1000));
  CHECK(r.step_time == TimeNs(3000));
}

TEST_CASE("host_wait: later launches wait for the op the host blocks on", "[sim][exact]") {
  // compute 1000 ns [0, 1000); host blocks until 1000; then a 500 B op on the
  // reduce-scatter stream (independent of the first) runs [1000, 1500).
  // Without the host_wait it would run [0, 500).
  // With 10 ns launch overhead: [10, 1010), host resumes at 1010, launch -> 1020,
  // [1020, 1520).
  ScheduleBuilder b;
  int c = b.launch(OpKind::grad_scale, ScheduleBuilder::kCompute, 1000);
  b.host_wait(c);
  int acc = b.launch(OpKind::grad_accumulate, ScheduleBuilder::kReduceScatter, 500);
  sim::SimResult r = run(b.s);
  CHECK(r.op_start[acc] == TimeNs(1000));
  CHECK(r.step_time == TimeNs(1500));
  sim::HardwareModel hw = test::unit_hardware();
  hw.launch_overhead_ns = 10;
  sim::SimResult o = run(b.s, hw);
  CHECK(o.op_start[c] == TimeNs(10));
  CHECK(o.op_start[acc] == TimeNs(1020));
  CHECK(o.step_time == TimeNs(1520));
}

TEST_CASE("a full launch queue blocks the host until a launched op finishes", "[sim][exact]") {
  // Queue depth 2; three 1000 B compute ops, then a 100 B op on another
  // stream. op0 and op1 launch at 0; op2's launch waits for op0 (1000) and
  // runs [2000, 3000) after op1; op3's launch waits for op1 (2000): [2000, 2100).
  // With the default depth op3 runs at once: [0, 100).
  ScheduleBuilder b;
  int o0 = b.launch(OpKind::grad_scale, ScheduleBuilder::kCompute, 1000);
  int o1 = b.launch(OpKind::grad_scale, ScheduleBuilder::kCompute, 1000);
  int o2 = b.launch(OpKind::grad_scale, ScheduleBuilder::kCompute, 1000);
  int o3 = b.launch(OpKind::grad_accumulate, ScheduleBuilder::kReduceScatter, 100);
  sim::SimResult free_run = run(b.s);
  CHECK(free_run.op_start[o3] == TimeNs(0));
  sim::HardwareModel hw = test::unit_hardware();
  hw.launch_queue_depth = 2;
  sim::SimResult r = run(b.s, hw);
  CHECK(r.op_start[o0] == TimeNs(0));
  CHECK(r.op_start[o1] == TimeNs(1000));
  CHECK(r.op_start[o2] == TimeNs(2000));
  CHECK(r.op_end[o2] == TimeNs(3000));
  CHECK(r.op_start[o3] == TimeNs(2000));
  CHECK(r.op_end[o3] == TimeNs(2100));
  CHECK(r.step_time == TimeNs(3000));
  // The host's blocked time shows as "launch queue full" on its lane: 0-1000, 1000-2000.
  int64_t blocked = 0;
  for (const traces::Event& e : r.trace.ranks.at(0).events)
    if (r.trace.str(e.name) == "launch queue full") blocked += e.dur_ns;
  CHECK(blocked == 2000);
}

TEST_CASE("peak allocated is the sum of the live buffers worked out by hand", "[sim][memory]") {
  // persistent p 1024 B; then a 2048 B, b 4096 B, free a, c 1536 B, free b, c.
  // Live: 1024 -> 3072 -> 7168 (peak) -> 5120 -> 6656 -> 1024.
  // Peak by category: parameters 1024, activations 6144; by unit: u0 holds a
  // and p (3072), b has no unit (4096).
  ScheduleBuilder b;
  int p = b.buffer(plan::BufferRole::param_shard, 1024, 0, true);
  int a = b.buffer(plan::BufferRole::activation, 2048, 0);
  int bb = b.buffer(plan::BufferRole::activation, 4096);
  int c = b.buffer(plan::BufferRole::activation, 1536);
  (void)p;
  b.alloc(a);
  b.alloc(bb);
  int op = b.launch(OpKind::grad_scale, ScheduleBuilder::kCompute, 100);
  b.free(a);
  b.alloc(c);
  b.free(bb, {op});
  b.free(c);
  sim::SimResult r = run(b.s);
  CHECK(r.persistent_bytes == 1024);
  CHECK(r.peak_allocated_bytes == 7168);
  CHECK(r.metrics.total.peak_allocated_bytes == 7168);
  CHECK(r.peak.by_category ==
        std::map<std::string, int64_t>{{"activations", 6144}, {"parameters", 1024}});
  CHECK(r.peak.by_unit == std::map<std::string, int64_t>{{"<none>", 4096}, {"u0", 3072}});
}

TEST_CASE("out of memory is a result naming the buffer, not a crash", "[sim][memory]") {
  // 4 MiB of device memory; an 8 MiB buffer needs a 20 MiB large-pool segment.
  ScheduleBuilder b;
  int big = b.buffer(plan::BufferRole::unsharded, int64_t{8} << 20);
  b.alloc(big);
  b.launch(OpKind::grad_scale, ScheduleBuilder::kCompute, 100);
  b.free(big);
  sim::SimResult r = run(b.s, test::unit_hardware(), int64_t{4} << 20);
  CHECK_FALSE(r.fits);
  CHECK(r.oom_buffer == "unsharded");  // buffer_name: the role, no unit, no micro-step
  CHECK(r.oom_bytes == (int64_t{8} << 20));
}

TEST_CASE("a host_wait on an op never launched is an error", "[sim]") {
  ScheduleBuilder b;
  int c = b.op(OpKind::grad_scale, ScheduleBuilder::kCompute, 100);
  b.host_wait(c);
  CHECK_THROWS_AS(run(b.s), sim::Error);
}

TEST_CASE("out of memory first blocks the host until pending frees complete", "[sim][memory]") {
  // 20 MiB of memory. a (12 MiB: its own 12 MiB segment, requests >= 10 MiB
  // get their size rounded to 2 MiB) is used by a 1000 ns op on the
  // reduce-scatter stream and freed with that op pending. b (12 MiB) cannot
  // reuse a's block yet and a second 12 MiB segment does not fit: the
  // allocator synchronizes (the host waits until the op ends at 1000 ns),
  // releases a's segment and retries. b is allocated at 1000 ns; reserved
  // never exceeds 12 MiB.
  ScheduleBuilder b;
  const int64_t mib = int64_t{1} << 20;
  int a = b.buffer(plan::BufferRole::activation, 12 * mib);
  int bb = b.buffer(plan::BufferRole::activation, 12 * mib);
  b.alloc(a);
  int user = b.launch(OpKind::grad_accumulate, ScheduleBuilder::kReduceScatter, 1000);
  b.free(a, {user});
  b.alloc(bb);
  b.free(bb);
  sim::SimResult r = run(b.s, test::unit_hardware(), 20 * mib);
  REQUIRE(r.fits);
  CHECK(r.peak_reserved_bytes == 12 * mib);
  CHECK(r.peak_allocated_bytes == 12 * mib);
  const std::vector<traces::MemoryEvent>& mem = r.trace.ranks[0].memory;
  REQUIRE(mem.size() == 4);
  CHECK(mem[0].time_ns == 0);
  CHECK(mem[2].bytes == 12 * mib);
  CHECK(mem[2].time_ns == 1000);
  CHECK(r.step_time == TimeNs(1000));
}

TEST_CASE("op dispatch: a device op starts op_dispatch_ns after it could, as idle time",
          "[sim][exact]") {
  // Dispatch 100 ns. The all-gather (a collective) starts at 0: [0, 1000).
  // c0 600 B starts at 100: [100, 700); c1 (after c0 on its stream and the
  // all-gather) at 1000 + 100: [1100, 1400). Step 1400 ns; compute 900 ns,
  // idle 1400 - 1000 (all-gather) - 300 (c1) = 100 ns (1000..1100).
  ScheduleBuilder b;
  int ag = b.launch(OpKind::all_gather, ScheduleBuilder::kAllGather, 2000);
  int c0 = b.launch(OpKind::grad_scale, ScheduleBuilder::kCompute, 600);
  int c1 = b.launch(OpKind::grad_scale, ScheduleBuilder::kCompute, 300, {ag});
  sim::HardwareModel hw = test::unit_hardware();
  hw.op_dispatch_ns = 100;
  sim::SimResult r = run(b.s, hw);
  CHECK(r.op_start[ag] == TimeNs(0));
  CHECK(r.op_start[c0] == TimeNs(100));
  CHECK(r.op_end[c0] == TimeNs(700));
  CHECK(r.op_start[c1] == TimeNs(1100));
  CHECK(r.step_time == TimeNs(1400));
  CHECK(r.metrics.total.compute_ms == Approx(0.0009));
  CHECK(r.metrics.total.idle_ms == Approx(0.0001));
}
