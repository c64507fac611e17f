// Emulated peers (one GPU standing for rank r of a world of 4): buffers have
// rank r's real sizes, so the executor's peak allocated bytes equal the
// simulator's prediction for that rank exactly (both drive alloc/'s allocator
// with the plan's actions in host order); every collective holds its comm
// stream for at least its modelled duration, and the trace shows it there.
// The other members' all-gather slots hold zeros (the executor zeroes every
// all-gather output under emulated peers), so the loss is finite.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/cuda/exec/cuda_rank_executor.h"
#include "engine/exec/schedule_info.h"
#include "engine/exec/train.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "sim/simulator.h"
#include "tests/engine/cuda/test_cuda_exec_util.h"

using namespace shardscope;

namespace {

// cudaEventElapsedTime's resolution is about half a microsecond.
constexpr int64_t kTimerSlackNs = 1000;

void check_rank(const plan::Graph& g, const std::string& flavor, bool reshard, int rank) {
  const int world_size = 4;
  const plan::Policy policy =
      test::make_policy({"flavor=" + flavor, "batch_size=2", "seq_len=16", "wrap.type=class",
                         "wrap.classes=[\"GPT2Block\"]",
                         std::string("reshard_after_forward=") + (reshard ? "true" : "false")});
  const plan::World world = plan::validate_policy(policy, g, world_size);
  const plan::UnitPlan units = plan::build_units(g, policy, world);
  const plan::Schedule s = plan::build_schedule(g, policy, units, rank);
  const sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  const sim::SimResult predicted = sim::simulate(g, units, s, hw);

  const auto durations = test::modelled_durations(hw);
  engine::cuda::EmulatedCommunicator comm(
      rank, world_size, engine::exec::comm_groups(g, policy, world_size), durations);
  const engine::exec::DataSource data(g, 0);
  engine::cuda::CudaExecOptions options;
  engine::cuda::CudaRankExecutor exec(g, policy, units, s, comm, data, options);
  exec.init_weights(0);
  for (int64_t step = 0; step < 2; ++step) {
    // Other members' all-gather slots are zeroed at each allocation, never a
    // reused block's stale bytes: the loss stays finite.
    const engine::exec::StepOutcome out = exec.run_step(step);
    INFO("step " << step << " loss " << out.loss);
    CHECK(std::isfinite(out.loss));
    CHECK(out.loss > 0);
  }

  CHECK(exec.peak_allocated_bytes() == predicted.peak_allocated_bytes);

  // The last step's op events are the last |ops| events, in op order
  // (record_step_trace appends them after the step's host waits).
  const traces::Trace& t = exec.trace();
  const traces::RankTrace& r = t.ranks.at(0);
  REQUIRE(r.events.size() >= s.ops.size());
  const size_t first = r.events.size() - s.ops.size();
  int collectives = 0;
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const plan::ScheduleOp& op = s.ops[i];
    if (!plan::is_collective(op.kind)) continue;
    const traces::Event& e = r.events[first + i];
    const traces::Lane& lane = r.lanes.at(e.lane);
    INFO("op " << i << " " << t.str(e.name) << " on " << t.str(lane.name));
    CHECK(t.str(e.name) == engine::exec::op_event_name(g, units, op));
    CHECK(traces::is_comm(e.category));
    // The all-reduce of one scalar runs on compute (clip/inf checks), others on comm lanes.
    if (!op.buffers.empty()) CHECK(lane.kind == traces::LaneKind::comm);
    const plan::ProcessGroup& grp = s.groups[static_cast<size_t>(op.group)];
    const engine::comm::Group group{grp.name, grp.ranks};
    const auto kind = op.kind == plan::OpKind::all_gather ? engine::cuda::CollectiveKind::all_gather
                      : op.kind == plan::OpKind::reduce_scatter
                          ? engine::cuda::CollectiveKind::reduce_scatter
                          : engine::cuda::CollectiveKind::all_reduce;
    const uint64_t bytes = kind == engine::cuda::CollectiveKind::all_gather
                               ? static_cast<uint64_t>(op.bytes) / grp.ranks.size()
                               : static_cast<uint64_t>(op.bytes);
    const int64_t modelled = durations(kind, bytes, group);
    CHECK(modelled > 0);
    CHECK(e.dur_ns + kTimerSlackNs >= modelled);
    ++collectives;
  }
  CHECK(collectives > 0);
  // What the communicator itself saw: every collective of both steps.
  CHECK(comm.issued().size() == 2 * static_cast<size_t>(collectives));
}

}  // namespace

TEST_CASE("emulated peers: peak allocated equals the simulator's, collectives hold their streams",
          "[cuda][exec][emulated]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  for (const std::string flavor : {"fsdp2", "fsdp1"})
    for (const bool reshard : {true, false})
      for (const int rank : {1, 3}) {
        INFO(flavor << " reshard_after_forward=" << reshard << " rank " << rank);
        check_rank(g, flavor, reshard, rank);
      }
}
