// Training driver of the CUDA engine: runs S steps of one rank on one GPU
// (the schedule's streams as CUDA streams, its events as cudaEvents, every
// buffer from alloc/'s CachingAllocator over cudaMalloc, collectives through
// a DeviceCommunicator: NCCL, or emulated peers on one GPU), and gathers what
// `shardscope run --backend cuda` reports. Same data-parallel semantics,
// initial weights and data as the CPU engine (engine/exec/train.h), so a
// step on CUDA can be compared with the CPU engine's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/cuda/comm/device_communicator.h"
#include "engine/cuda/memory/cuda_backing.h"
#include "engine/cuda/ops/ops.h"
#include "engine/exec/rank_plan.h"
#include "engine/exec/train.h"
#include "plan/graph.h"
#include "plan/policy.h"
#include "profiler/cupti/cupti_recorder.h"
#include "traces/trace.h"

namespace shardscope::engine::cuda {

struct CudaTrainConfig {
  exec::TrainConfig
      base;              // graph, policy, world_size, steps, data, model name (save/load: refused)
  int device = 0;        // CUDA ordinal (cudaSetDevice before anything else)
  bool profile = false;  // record with CUPTI (profiler/cupti): trace events are the GPU's
  AttentionKernel attention_kernel = AttentionKernel::simt;  // CudaExecOptions::attention_kernel
  bool deterministic_attention = false;  // CudaExecOptions::deterministic_attention (cudnn)
  bool cuda_graph = false;  // capture the step as a CUDA graph (refused when the policy
                            // needs host synchronisation: fsdp1 limit_all_gathers, fp16
                            // dynamic loss scaling, CPU offload)
};

struct CudaRankRun {
  exec::RankRun run;                // losses, step seconds, peak allocated (the allocator's), trace
  int64_t peak_reserved_bytes = 0;  // the allocator's segments
  int64_t other_device_bytes = 0;   // peak of device memory outside the allocator (CUPTI
                                    // MEMORY2: cuBLAS workspace, NCCL buffers, scratch); -1
                                    // without --profile
  uint64_t cupti_dropped_records = 0;
  std::string device_name;
  int64_t persistent_bytes = 0;          // the allocator's bytes before the first step
  int64_t executor_device_bytes = 0;     // the executor's own memory outside the allocator
  std::vector<int> host_syncs_per_step;  // host synchronisations of each step (start,
                                         // host_waits, end)
  // With --profile: CUPTI's MEMORY2 records (device allocations and frees, in
  // time order) and every segment the allocator obtained, to tell them apart.
  // The trace's memory records are the allocator's own (host side, as the
  // CPU engine's and the simulator's); MEMORY2 records are not added to it.
  std::vector<profiler::MemoryRecord> cupti_memory;
  std::vector<CudaBacking::SegmentRecord> allocator_segments;
};

// Peak over time of the device bytes that MEMORY2 records and that are not
// segments of the allocator (an allocation whose (address, bytes) is one of
// `segments`, and its release, are the allocator's).
int64_t peak_other_device_bytes(const std::vector<profiler::MemoryRecord>& records,
                                const std::vector<CudaBacking::SegmentRecord>& segments);

// Runs the steps on this rank with its plan (built once by the caller:
// exec::build_rank_plan for config.base's graph, policy and world size and
// comm.rank(); rank_plan.groups are the communicator's). Throws (after
// comm.abort) on any error; first of all when the CUDA runtime finds no device
// (query_devices()'s message), for save/load (not supported on the CUDA
// backend yet) and for cuda_graph (not implemented).
CudaRankRun train_cuda_rank(const CudaTrainConfig& config, const exec::RankPlan& rank_plan,
                            DeviceCommunicator& comm, const exec::TrainHooks& hooks);
// The same, building this rank's plan once the device is known to exist.
CudaRankRun train_cuda_rank(const CudaTrainConfig& config, DeviceCommunicator& comm,
                            const exec::TrainHooks& hooks);

}  // namespace shardscope::engine::cuda
