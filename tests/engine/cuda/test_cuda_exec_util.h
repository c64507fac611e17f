// Helpers of the CUDA executor's tests (test_cuda_exec*.cpp): policies from
// --set assignments, a world-1 NCCL communicator over an in-process TCP
// store, and modelled collective durations for emulated peers (sim/'s
// closed forms, as the CLI supplies them).
#pragma once

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda/comm/emulated_communicator.h"
#include "engine/cuda/comm/nccl_communicator.h"
#include "engine/exec/train.h"
#include "engine/launch/launch.h"
#include "plan/models.h"
#include "plan/policy.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"

namespace shardscope::test {

inline plan::Policy make_policy(const std::vector<std::string>& sets) {
  nlohmann::json doc = nlohmann::json::object();
  for (const std::string& s : sets) plan::apply_set(doc, s);
  return plan::policy_from_json(doc);
}

// Relative L2 distance of a to ref.
inline double rel_norm_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    r += double(ref[i]) * ref[i];
  }
  return std::sqrt(d) / std::max(std::sqrt(r), 1e-30);
}

// NCCL with one rank on the current device: the real NCCL path.
struct NcclWorldOne {
  explicit NcclWorldOne(std::vector<engine::comm::Group> groups)
      : server("127.0.0.1", 0, "cuda-exec-test", 1),
        store("127.0.0.1", server.port(), "cuda-exec-test", 1, 0, std::chrono::seconds(30)),
        comm(0, 1, std::move(groups), store, std::chrono::seconds(60)) {}
  engine::launch::TcpStoreServer server;
  engine::launch::TcpStore store;
  engine::cuda::NcclCommunicator comm;
};

// Full buffer S of a collective from the emulated communicator's byte
// convention (all_gather: per-rank input; others: S itself).
inline double full_collective_bytes(engine::cuda::CollectiveKind kind, uint64_t bytes,
                                    const engine::comm::Group& group) {
  return kind == engine::cuda::CollectiveKind::all_gather
             ? static_cast<double>(bytes) * static_cast<double>(group.ranks.size())
             : static_cast<double>(bytes);
}

inline plan::OpKind op_kind_of(engine::cuda::CollectiveKind kind) {
  switch (kind) {
    case engine::cuda::CollectiveKind::all_gather:
      return plan::OpKind::all_gather;
    case engine::cuda::CollectiveKind::reduce_scatter:
      return plan::OpKind::reduce_scatter;
    default:
      return plan::OpKind::all_reduce;
  }
}

// Modelled duration of each emulated collective on `hw` (sim::collective_time).
inline engine::cuda::CollectiveDuration modelled_durations(const sim::HardwareModel& hw) {
  return [hw](engine::cuda::CollectiveKind kind, uint64_t bytes,
              const engine::comm::Group& group) -> int64_t {
    const sim::GroupSpan span = sim::group_span(group.ranks, hw.gpus_per_node);
    return sim::collective_time(hw, op_kind_of(kind), full_collective_bytes(kind, bytes, group),
                                span)
        .ns;
  };
}

}  // namespace shardscope::test
