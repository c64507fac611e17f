// NcclCommunicator of a build without NCCL (CMake found no nccl.h or
// libnccl): every construction is refused with a message, never a silent
// fallback to another backend.
#include "engine/cuda/comm/nccl_communicator.h"

namespace shardscope::engine::cuda {

struct NcclCommunicator::Impl {};

NcclCommunicator::NcclCommunicator(int rank, int world_size, std::vector<comm::Group> groups,
                                   launch::TcpStore& store, std::chrono::milliseconds timeout)
    : rank_(rank), world_(world_size), groups_(std::move(groups)) {
  (void)store;
  (void)timeout;
  throw comm::CommError("nccl communicator: rank " + std::to_string(rank) +
                        ": this build of shardscope has no NCCL (CMake found no nccl.h / "
                        "libnccl in the CUDA toolkit)");
}

NcclCommunicator::~NcclCommunicator() = default;

void NcclCommunicator::all_gather(int, const void*, void*, size_t, plan::DType, cudaStream_t) {}
void NcclCommunicator::reduce_scatter(int, const void*, void*, size_t, plan::DType, comm::ReduceOp,
                                      cudaStream_t) {}
void NcclCommunicator::all_reduce(int, void*, size_t, plan::DType, comm::ReduceOp, cudaStream_t) {}
void NcclCommunicator::broadcast(int, void*, size_t, int, cudaStream_t) {}
void NcclCommunicator::barrier() {}
void NcclCommunicator::abort(const std::string&) {}
void NcclCommunicator::check_async_errors() {}

std::string NcclCommunicator::version() {
  return "NCCL (not built)";
}

}  // namespace shardscope::engine::cuda
