// NCCL's own device buffers, outside PyTorch's caching allocator: what
// nvidia-smi shows on top of torch.cuda.memory_reserved(). An estimate
// (docs/allocator.md, "Memory outside the tensors"): NCCL sizes them at
// communicator set-up from the topology, so the channel count is a hardware
// field, not a measurement.
#pragma once

#include <cstdint>

#include "plan/schedule.h"
#include "sim/hardware.h"

namespace shardscope::sim {

/// Per channel and connection, the receive buffers of NCCL's three protocols
/// (NCCL src/init.cc): LL = NCCL_LL_LINES_PER_THREAD (8) x
/// NCCL_LL_MAX_NTHREADS (512) x NCCL_STEPS (8) x 16 B = 524,288 B; LL128 =
/// NCCL_LL128_ELEMS_PER_THREAD (120) x NCCL_LL128_MAX_NTHREADS (640) x
/// NCCL_STEPS (8) x 8 B = 4,915,200 B; SIMPLE = NCCL_BUFFSIZE
/// (HardwareModel::nccl_buffsize_bytes, 4 MiB by default).
inline constexpr int64_t kNcclLlBufferBytes = 8 * 512 * 8 * 16;
inline constexpr int64_t kNcclLl128BufferBytes = 120 * 640 * 8 * 8;

struct NcclBufferEstimate {
  int64_t communicators = 0;  ///< process groups of > 1 rank this rank runs collectives on
  int64_t bytes = 0;          ///< communicators x channels x (SIMPLE + LL + LL128)
};

/// The estimate for the schedule's own rank: one ring connection per channel
/// per communicator (tree and NVLS connections, proxy and host buffers are
/// not counted). Zero when hw.nccl_channels is 0 (no NCCL: cpu-local).
NcclBufferEstimate nccl_buffer_estimate(const plan::Schedule& schedule, const HardwareModel& hw);

}  // namespace shardscope::sim
