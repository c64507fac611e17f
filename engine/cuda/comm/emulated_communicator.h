// Emulated peers on one GPU (`shardscope run --backend cuda --emulate-world N
// --rank r`): this process is rank r of a world of N. Buffers have rank r's
// real sizes (the schedule is rank r's), compute runs for real, and each
// collective occupies its stream for the duration the hardware model gives
// for its size and group, without using SMs and without moving data.
//
// Mechanism, per collective on stream S (ticket k = S's k-th collective):
//   1. cudaLaunchHostFunc(S, reached): when S gets there, a CUDA host
//      function marks the collective reached. It starts then (start_k =
//      profiler::host_now_ns(), released at start_k + duration_k) when it is
//      the oldest unreleased collective of its process group; otherwise it
//      starts when the one before it in its group is released. One group runs
//      one collective at a time, in issue order, as a NCCL communicator does
//      (its kernels queue on the communicator's own stream) and as the
//      simulator and the CPU engine model it (collective_turns.h: these
//      rules without CUDA, tested everywhere). The host function only takes a mutex briefly
//      and never blocks or calls CUDA (the driver may run the host functions
//      of all streams one at a time on one thread, and S does not go on
//      until it returned).
//   2. the data effect below (a cudaMemcpyAsync and/or a small kernel), so
//      that its own time lies inside the collective's interval;
//   3. cuStreamWaitValue32(S, flag_S, k, GEQ): the stream waits, in the GPU's
//      front end (no SM, no copy engine), until flag_S >= k (cyclic compare).
//      The function comes from cudaGetDriverEntryPointByVersion (CUDA 12.0
//      ABI: the _v2 stream memory operations every CUDA 12+ driver supports);
//      libcuda is never linked. The flags are 32-bit words of host-pinned,
//      device-mapped memory (cudaHostAlloc(cudaHostAllocMapped)), one per
//      stream, 64 bytes apart.
//   4. cudaEventRecord of the stream's "after last wait" event (the
//      destructor waits on it, see below).
// One release thread per communicator sleeps until the earliest due time
// (condition variable; the last 100 us are spun, so releases land within a
// few microseconds of start + duration) and writes flag_S = k with a release
// store. Tickets of one stream are released in order (ticket k + 1 starts
// only after wait k passed), so a per-stream flag never runs ahead of a wait
// it should hold; streams never share a flag, so collectives of different
// groups on different streams finish out of issue order when their durations
// say so, and their waits overlap in time as concurrent NCCL collectives on
// different communicators would. Waiting for the group's turn cannot
// deadlock: the host issues a group's collectives in order, and a stream can
// only wait (cudaStreamWaitEvent) for work issued before.
//
// Why host functions rather than a cuStreamWriteValue32 "reached" marker:
// the host function wakes the release thread through a condition variable,
// where a marker would have to be polled (one CPU core spinning for the whole
// run). Its cost: the start stamp lags the stream by the host-function
// latency (microseconds), and where the driver serialises host functions two
// collectives reached at the same instant get stamps a few microseconds
// apart. The data effect and the wait are enqueued after the host function,
// so the stream also pays that latency once per collective.
//
// Limits:
//  - A stream memory wait holds its hardware work queue, not just its stream:
//    streams beyond CUDA_DEVICE_MAX_CONNECTIONS (default 8) share queues, and
//    work of another stream queued behind a waiting one is held too (false
//    dependency). Keep the executor's streams within that number.
//  - Lazy module loading (CUDA's default since 12.2) loads a kernel at its
//    first launch, and the load may synchronise the context: a kernel
//    launched for the first time while a stream is held by a wait starts
//    only once the wait is released (CUDA C++ Programming Guide, "Lazy
//    Loading", "Potential Hazards"). Measured on an H200 (driver 580.159.04,
//    2026-11-26, tests/engine/cuda/test_cuda_comm_emulated.cpp [.diag]): a
//    1 ms kernel on a third stream, issued after two 20 ms collectives, ended
//    at 21.5 ms at its first launch and at 1.1 ms once loaded; with
//    CUDA_MODULE_LOADING=EAGER, at 1.3 ms at its first launch. Stream
//    creation order and priorities made no difference. The constructor
//    loads the data effects' own kernels (preload_divide_kernels); a
//    caller's kernels are its own business: the engine's first step (its
//    warm-up) loads them, and may be stretched by this.
//  - At most 64 distinct streams per communicator (CommError beyond).
//  - CUDA graph capture is refused (CommError): tickets are fixed at enqueue,
//    a replayed graph would wait on tickets already released.
//  - The modelled duration starts when the stream reaches the collective on
//    this rank: there is no waiting for late peers (all ranks are this one).
//
// Results ("the other members contribute zeros"): all_gather leaves the other
// members' slots as they were (rank r's own slot is copied into place unless
// send already is that slot); reduce_scatter gives this rank's own
// contribution (its `count` elements of `send`, copied to recv unless
// aliased) and all_reduce leaves data as is, both divided by the group size
// for avg (divide_kernel.h: in float, rounded to the element type); broadcast
// moves nothing. Values are not those of an N-rank run; sizes, timing and
// memory are.
//
// A duration model that throws passes its exception through the collective call (nothing
// enqueued); a negative duration is a CommError.
//
// Destruction (and abort()) releases every ticket issued so far at once
// (collectives reached later are released as they start; issued() then shows
// released_ns = the release time);
// the destructor then waits (cudaEventSynchronize) until each stream passed
// its last wait, so that no host function or wait refers to this object or
// its flag memory after it is gone, and joins the release thread. It does not
// hang as long as the streams' other work completes.
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
  // Works on the device current on the calling thread; streams passed later
  // must belong to it. Throws CommError for bad groups (collective_args.h)
  // or an empty `duration`; CudaError without a driver or device (naming the
  // runtime error), when the device cannot map host memory, when the driver
  // has no cuStreamWaitValue32 entry point, or when a test wait on a private
  // stream fails (stream memory operations not supported).
  EmulatedCommunicator(int rank, int world_size, std::vector<comm::Group> groups,
                       CollectiveDuration duration);
  ~EmulatedCommunicator() override;  // releases every pending wait, joins the thread
  EmulatedCommunicator(const EmulatedCommunicator&) = delete;
  EmulatedCommunicator& operator=(const EmulatedCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  const std::vector<comm::Group>& groups() const override { return groups_; }
  CommunicatorKind kind() const override { return CommunicatorKind::emulated; }
  void all_gather(int group, const void* send, void* recv, size_t count, plan::DType dt,
                  cudaStream_t stream) override;
  void reduce_scatter(int group, const void* send, void* recv, size_t count, plan::DType dt,
                      comm::ReduceOp op, cudaStream_t stream) override;
  void all_reduce(int group, void* data, size_t count, plan::DType dt, comm::ReduceOp op,
                  cudaStream_t stream) override;
  void broadcast(int group, void* data, size_t bytes, int root, cudaStream_t stream) override;
  void barrier() override {}
  // Releases every pending wait; later calls throw CommError naming this
  // rank and `message`.
  void abort(const std::string& message) override;

  // Each collective issued so far, in issue order: modelled duration, the
  // host-clock (profiler::host_now_ns) start (its stream reached it and its
  // group's earlier collectives were done) and the time its wait was
  // released (0 = not yet); tests compare them with the trace. `bytes` is
  // what the duration model was given.
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
