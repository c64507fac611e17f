// Hand-built schedules and a hardware model whose figures make every duration
// a round number of nanoseconds: 1 FLOP = 1 ns, 1 HBM byte = 1 ns, a ring over
// 2 ranks moves S bytes in S/2 ns, no latency, no contention.
#pragma once

#include <string>
#include <vector>

#include "plan/schedule.h"
#include "sim/hardware.h"

namespace shardscope::test {

inline sim::HardwareModel unit_hardware() {
  sim::HardwareModel h;
  h.name = "unit";
  h.peak_flops_fp32 = h.peak_flops_bf16 = h.peak_flops_fp16 = 1e9;  // 1 FLOP/ns
  h.hbm_bytes_per_s = 1e9;                                          // 1 B/ns
  h.memory_bytes = int64_t{1} << 30;
  h.nvlink_bus_bytes_per_s = 1e9;
  h.nvlink_latency_ns = 0;
  h.ib_bytes_per_s = 0.5e9;
  h.ib_latency_ns = 0;
  h.pcie_bytes_per_s = 1e9;
  h.host_memory_bytes_per_s = 1e9;
  h.efficiency = {{"default", 1.0}};
  h.launch_overhead_ns = 0;
  h.contention_factor = 1.0;
  h.gpus_per_node = 8;
  return h;
}

// Streams: 0 host, 1 compute, 2 all_gather, 3 reduce_scatter; one group of
// ranks {0, 1}.
class ScheduleBuilder {
 public:
  ScheduleBuilder() {
    s.rank = 0;
    s.world = plan::World{2, 2, 1};
    s.workload = plan::Workload{1, 1};
    s.streams = {"host", "compute", "all_gather", "reduce_scatter"};
    s.stream_roles = {plan::StreamRole::host, plan::StreamRole::compute,
                      plan::StreamRole::all_gather, plan::StreamRole::reduce_scatter};
    s.groups = {plan::ProcessGroup{"shard0", {0, 1}, plan::GroupRole::shard}};
  }
  static constexpr int kCompute = 1, kAllGather = 2, kReduceScatter = 3;

  // A non-graph op on `stream` moving `bytes` (1 ns per byte on the unit hardware).
  int op(plan::OpKind kind, int stream, int64_t bytes, std::vector<int> waits = {}) {
    plan::ScheduleOp o;
    o.kind = kind;
    o.stream = stream;
    o.bytes = bytes;
    o.waits = std::move(waits);
    if (plan::is_collective(kind)) {
      o.group = 0;
      o.seq = next_seq++;
    }
    s.ops.push_back(o);
    return static_cast<int>(s.ops.size()) - 1;
  }
  int launch(plan::OpKind kind, int stream, int64_t bytes, std::vector<int> waits = {}) {
    int id = op(kind, stream, bytes, std::move(waits));
    s.actions.push_back(plan::Action{plan::ActionKind::launch, id, -1, {}});
    return id;
  }
  void host_wait(int op_index) {
    s.actions.push_back(plan::Action{plan::ActionKind::host_wait, op_index, -1, {}});
  }
  int buffer(plan::BufferRole role, int64_t bytes, int unit = -1, bool persistent = false) {
    plan::Buffer b;
    b.role = role;
    b.bytes = bytes;
    b.category = plan::buffer_role_category(role);
    b.stream = kCompute;
    b.unit = unit;
    b.persistent = persistent;
    s.buffers.push_back(b);
    return static_cast<int>(s.buffers.size()) - 1;
  }
  void alloc(int b) { s.actions.push_back(plan::Action{plan::ActionKind::alloc, -1, b, {}}); }
  void free(int b, std::vector<int> pending = {}) {
    s.actions.push_back(plan::Action{plan::ActionKind::free, -1, b, std::move(pending)});
  }

  plan::Schedule s;
  int64_t next_seq = 0;
};

}  // namespace shardscope::test
