// Collectives on device memory, issued on a CUDA stream: the CUDA engine's
// side of engine/comm/communicator.h (same groups, same ordering rules: calls
// on one group come in the same order on every member; calls on different
// groups may be issued to different streams and run concurrently).
//
// Every call is asynchronous: it enqueues the collective on `stream` and
// returns; the data is ready when the stream reaches that point. Element types
// are f32, bf16 or f16 (plan::DType); reductions run in the element type as
// NCCL does (bf16 sums in bf16 on the wire).
//
// Implementations:
//  - NcclCommunicator (nccl_communicator.h): one process per GPU, one NCCL
//    communicator per group, ncclUniqueId exchanged through the launcher's
//    TCP store; world size 1 runs the real NCCL path on one GPU.
//  - EmulatedCommunicator (emulated_communicator.h): rank r of a modelled
//    world of N on one GPU; each collective holds its stream for the modelled
//    duration without using SMs and moves no data between ranks.
//
// Failure: errors (NCCL errors, a peer that died, an abort, a timeout) throw
// CommError (engine/comm/communicator.h) naming the rank and the collective.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "plan/graph.h"

namespace shardscope::engine::cuda {

// What carries a DeviceCommunicator's collectives: NCCL between real ranks,
// the emulated peers of --emulate-world (one real rank, the others' data
// held for the hardware model's time), or none (a test double without peers).
enum class CommunicatorKind : uint8_t { nccl, emulated, none };
// "nccl", "emulated", "none": for traces and messages.
const char* communicator_kind_name(CommunicatorKind kind);

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual const std::vector<comm::Group>& groups() const = 0;
  virtual CommunicatorKind kind() const = 0;

  // recv[i * count ...] = member i's send[count] (send may alias recv's own slot).
  virtual void all_gather(int group, const void* send, void* recv, size_t count, plan::DType dt,
                          cudaStream_t stream) = 0;
  // recv[count] = reduce over members of send[my_index * count ...]; send holds
  // group_size * count elements. recv may alias send + my_index * count.
  virtual void reduce_scatter(int group, const void* send, void* recv, size_t count, plan::DType dt,
                              comm::ReduceOp op, cudaStream_t stream) = 0;
  // data[count] reduced over the group in place.
  virtual void all_reduce(int group, void* data, size_t count, plan::DType dt, comm::ReduceOp op,
                          cudaStream_t stream) = 0;
  // data = root member's data; root is a global rank in the group.
  virtual void broadcast(int group, void* data, size_t bytes, int root, cudaStream_t stream) = 0;
  // Blocks the host until every member has reached this point (host barrier;
  // through the store for NCCL, immediate for emulated peers).
  virtual void barrier() = 0;
  // Marks this rank failed (peers' later calls throw naming it); never throws.
  virtual void abort(const std::string& message) = 0;
  // Throws CommError, naming the rank and the group, when a collective
  // already enqueued failed on the device side (NCCL's asynchronous errors:
  // a remote peer's error, a network or system error). Such a collective
  // never completes on its own, so the host polls this while it waits on the
  // device (engine/cuda/exec: wait_device). Cheap: no communication.
  virtual void check_async_errors() {}
};

}  // namespace shardscope::engine::cuda
