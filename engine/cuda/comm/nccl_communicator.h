// DeviceCommunicator over NCCL: one process per GPU; one ncclComm_t per
// schedule group (the world and every shard/replica group), each made with
// ncclCommInitRankConfig from an ncclUniqueId that the group's lowest rank
// creates and publishes through the launcher's TCP store, hex-encoded, under
// "nccl/<k>/<group name>" (k: this process's k-th NcclCommunicator, equal on
// every rank since they make them in the same order; a store that outlives a
// communicator never hands a stale id to the next one). Groups are made one
// after the other in `groups` order; a rank skips those it is not in.
// Communicators are non-blocking (config.blocking = 0): initialisation and
// enqueueing are polled (ncclCommGetAsyncError) against `timeout`, so a peer
// that never joins is an error naming the group, not a hang. The collectives
// themselves run on the device: a peer dying mid-collective surfaces through
// NCCL's own error reporting or a stream that never completes (the caller's
// watchdog calls abort()).
// Multi-node works through the same store (MASTER_ADDR/MASTER_PORT from
// torchrun, srun or mpirun: engine/launch). World size 1 runs the real NCCL
// path on one GPU.
//
// Errors: NCCL failures throw CommError naming the rank, the group and the
// collective with ncclGetErrorString and ncclGetLastError, followed by the
// abort records ("abort/<r>") peers left in the store; a peer that dies
// shows up as ncclRemoteError / a store timeout naming the missing ranks.
// Element types: f32, bf16, f16 (ncclFloat32/ncclBfloat16/ncclFloat16);
// sum/avg are ncclSum/ncclAvg; broadcast moves bytes (ncclInt8).
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
  // must be current (cudaSetDevice) on the calling thread. Throws CommError
  // (bad groups, NCCL init failure or timeout), CudaError (no driver or
  // device: the message names the runtime error).
  NcclCommunicator(int rank, int world_size, std::vector<comm::Group> groups,
                   launch::TcpStore& store, std::chrono::milliseconds timeout);
  ~NcclCommunicator() override;  // ncclCommDestroy (ncclCommAbort after abort())
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  const std::vector<comm::Group>& groups() const override { return groups_; }
  CommunicatorKind kind() const override { return CommunicatorKind::nccl; }
  void all_gather(int group, const void* send, void* recv, size_t count, plan::DType dt,
                  cudaStream_t stream) override;
  void reduce_scatter(int group, const void* send, void* recv, size_t count, plan::DType dt,
                      comm::ReduceOp op, cudaStream_t stream) override;
  void all_reduce(int group, void* data, size_t count, plan::DType dt, comm::ReduceOp op,
                  cudaStream_t stream) override;
  void broadcast(int group, void* data, size_t bytes, int root, cudaStream_t stream) override;
  void barrier() override;
  void abort(const std::string& message) override;
  // ncclCommGetAsyncError on every communicator of this rank.
  void check_async_errors() override;

  // "NCCL 2.28.x" from ncclGetVersion (needs no device).
  static std::string version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, world_ = 1;
  std::vector<comm::Group> groups_;
};

}  // namespace shardscope::engine::cuda
