// DeviceCommunicator over NCCL: one process per GPU; one ncclComm_t per
// schedule group (the world and every shard/replica group), each made with
// ncclCommInitRank from an ncclUniqueId that the group's lowest rank creates
// and publishes through the launcher's TCP store (key "nccl/<group name>").
// Multi-node works through the same store (MASTER_ADDR/MASTER_PORT from
// torchrun, srun or mpirun: engine/launch). World size 1 runs the real NCCL
// path on one GPU.
//
// Errors: NCCL failures throw CommError naming the rank, the group and the
// collective with ncclGetErrorString and ncclGetLastError; a peer that dies
// shows up as ncclRemoteError / a store timeout naming the missing ranks.
// abort() calls ncclCommAbort on every communicator and sets the store key
// "abort/<rank>" so peers blocked in the store fail naming this rank.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda/comm/device_communicator.h"
#include "engine/launch/launch.h"

namespace shardscope::engine::cuda {

class NcclCommunicator final : public DeviceCommunicator {
 public:
  // Every rank of the world calls this collectively with the same groups
  // (comm_groups() order). `store` must outlive the communicator. The device
  // must be current (cudaSetDevice) on the calling thread.
  NcclCommunicator(int rank, int world_size, std::vector<comm::Group> groups,
                   launch::TcpStore& store, std::chrono::milliseconds timeout);
  ~NcclCommunicator() override;  // ncclCommDestroy (ncclCommAbort after abort())
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  const std::vector<comm::Group>& groups() const override { return groups_; }
  const char* kind() const override { return "nccl"; }
  void all_gather(int group, const void* send, void* recv, size_t count, plan::DType dt,
                  cudaStream_t stream) override;
  void reduce_scatter(int group, const void* send, void* recv, size_t count, plan::DType dt,
                      comm::ReduceOp op, cudaStream_t stream) override;
  void all_reduce(int group, void* data, size_t count, plan::DType dt, comm::ReduceOp op,
                  cudaStream_t stream) override;
  void broadcast(int group, void* data, size_t bytes, int root, cudaStream_t stream) override;
  void barrier() override;
  void abort(const std::string& message) override;

  // "NCCL 2.28.x" from ncclGetVersion.
  static std::string version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, world_ = 1;
  std::vector<comm::Group> groups_;
};

}  // namespace shardscope::engine::cuda
