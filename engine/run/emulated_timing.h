// Collective durations for emulated peers (`run --backend cuda --emulate-world
// N --rank R`): the simulator's closed-form collective time (sim/cost_model.h
// collective_time) for the collective the engine issues, so that an emulated
// rank's communication takes what `shardscope simulate` predicts for the same
// hardware. CUDA-free: engine/run/run_cuda.cpp wraps it into the engine's CollectiveDuration.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/hardware.h"

namespace shardscope::engine::run {

enum class EmulatedCollective : uint8_t { all_gather, reduce_scatter, all_reduce, broadcast };

// Modelled duration in ns of one collective over the global ranks `group_ranks`
// (their nodes: rank / hw.gpus_per_node). `bytes` follows the engine's
// DeviceCommunicator convention (engine/cuda/comm/emulated_communicator.h):
//   all_gather      per-rank input          -> simulator S = bytes x n (output)
//   reduce_scatter  input (output x n)      -> S = bytes
//   all_reduce      the buffer              -> S = bytes
//   broadcast       the buffer              -> ring broadcast: the all-gather
//                   formula's latency terms and S / bus bandwidth for the data
//                   (nccl-tests: broadcast bus bandwidth = algorithm bandwidth)
// A group of one rank takes 0 ns (as in the simulator).
int64_t emulated_collective_ns(const sim::HardwareModel& hw, EmulatedCollective kind,
                               uint64_t bytes, const std::vector<int>& group_ranks);

}  // namespace shardscope::engine::run
