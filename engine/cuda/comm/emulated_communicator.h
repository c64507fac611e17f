// Emulated peers on one GPU (`shardscope run --backend cuda --emulate-world N
// --rank r`): this process is rank r of a world of N. Buffers have rank r's
// real sizes (the schedule is rank r's), compute runs for real, and each
// collective occupies its stream for the duration the hardware model gives
// for its size and group, without using SMs and without moving data:
//
//   enqueue:  the stream waits (cuStreamWaitValue32, reached through
//             cudaGetDriverEntryPoint; GEQ on a 32-bit flag in host-pinned,
//             device-mapped memory) for flag >= ticket;
//             a cudaLaunchHostFunc *before* the wait tells the release thread
//             when the stream reached the collective (its start time);
//   release:  one host thread per communicator releases ticket k at
//             start_k + duration_k (host clock), writing flag = k.
//   Host functions run one at a time per process, so they only stamp start
//   times; the waits themselves occupy their streams concurrently, as
//   collectives on different streams would.
//
// Results: all_gather leaves the other members' slots as they were (rank r's
// own slot is copied into place); reduce_scatter and all_reduce give this
// rank's own contribution (count elements of `send` at its slot / data as
// is; avg divides by the group size): values are not those of an N-rank run,
// sizes, timing and memory are.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda/comm/device_communicator.h"

namespace shardscope::engine::cuda {

enum class CollectiveKind : uint8_t { all_gather, reduce_scatter, all_reduce, broadcast };

// Modelled duration (ns) of one collective: bytes = the bytes each rank
// contributes (all_gather: per-rank input; reduce_scatter: per-rank output x
// group size, as NCCL's "size" convention; all_reduce/broadcast: the buffer).
// Supplied by the caller (the CLI wraps sim/'s hardware model; engine/ does
// not depend on sim/).
using CollectiveDuration =
    std::function<int64_t(CollectiveKind kind, uint64_t bytes, const comm::Group& group)>;

class EmulatedCommunicator final : public DeviceCommunicator {
 public:
  // Throws CudaError when stream memory operations are not supported by the
  // driver (CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR...) or the
  // driver entry point cannot be found.
  EmulatedCommunicator(int rank, int world_size, std::vector<comm::Group> groups,
                       CollectiveDuration duration);
  ~EmulatedCommunicator() override;  // releases every pending wait, joins the thread
  EmulatedCommunicator(const EmulatedCommunicator&) = delete;
  EmulatedCommunicator& operator=(const EmulatedCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  const std::vector<comm::Group>& groups() const override { return groups_; }
  const char* kind() const override { return "emulated"; }
  void all_gather(int group, const void* send, void* recv, size_t count, plan::DType dt,
                  cudaStream_t stream) override;
  void reduce_scatter(int group, const void* send, void* recv, size_t count, plan::DType dt,
                      comm::ReduceOp op, cudaStream_t stream) override;
  void all_reduce(int group, void* data, size_t count, plan::DType dt, comm::ReduceOp op,
                  cudaStream_t stream) override;
  void broadcast(int group, void* data, size_t bytes, int root, cudaStream_t stream) override;
  void barrier() override {}
  void abort(const std::string& message) override;

  // Each collective issued so far: modelled duration and the host-clock
  // start/end the release thread used (tests compare them with the trace).
  struct Issued {
    CollectiveKind kind;
    int group;
    uint64_t bytes;
    int64_t duration_ns, start_ns, released_ns;
  };
  std::vector<Issued> issued() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, world_ = 1;
  std::vector<comm::Group> groups_;
};

}  // namespace shardscope::engine::cuda
