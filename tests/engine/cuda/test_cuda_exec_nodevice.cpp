// train_cuda_rank on a machine the CUDA runtime finds no device on (CI: no
// driver): a clear error quoting the runtime's (cudaErrorInsufficientDriver
// or cudaErrorNoDevice), raised before anything else is touched, and the
// communicator aborted with it so that peers fail fast. On a machine with a
// device the same entry point refuses what the CUDA backend does not do.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cuda/device_query.h"
#include "engine/cuda/exec/cuda_train.h"
#include "plan/models.h"
#include "plan/policy.h"

using namespace shardscope;

namespace {

// A communicator that must never be used: only abort() may be called.
class NoCommunicator final : public engine::cuda::DeviceCommunicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  const std::vector<engine::comm::Group>& groups() const override { return groups_; }
  engine::cuda::CommunicatorKind kind() const override {
    return engine::cuda::CommunicatorKind::none;
  }
  void all_gather(int, const void*, void*, size_t, plan::DType, cudaStream_t) override { used(); }
  void reduce_scatter(int, const void*, void*, size_t, plan::DType, engine::comm::ReduceOp,
                      cudaStream_t) override {
    used();
  }
  void all_reduce(int, void*, size_t, plan::DType, engine::comm::ReduceOp, cudaStream_t) override {
    used();
  }
  void broadcast(int, void*, size_t, int, cudaStream_t) override { used(); }
  void barrier() override { used(); }
  void abort(const std::string& message) override { aborted = message; }
  std::string aborted;

 private:
  [[noreturn]] static void used() { throw std::logic_error("NoCommunicator used"); }
  std::vector<engine::comm::Group> groups_{{"world", {0}}};
};

std::string error_of(const engine::cuda::CudaTrainConfig& config, NoCommunicator& comm) {
  try {
    engine::cuda::train_cuda_rank(config, comm, {});
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("train_cuda_rank without a usable device names the runtime's error", "[cuda][exec]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  engine::cuda::CudaTrainConfig config;
  config.base.graph = &g;
  config.base.world_size = 1;
  NoCommunicator comm;
  const engine::cuda::DeviceQuery q = engine::cuda::query_devices();
  if (q.ok && q.device_count > 0) {
    // A device is here: the no-device path cannot run; the refusals can.
    config.base.save_dir = "/nonexistent";
    const std::string message = error_of(config, comm);
    CHECK(message.find("not supported on the CUDA backend yet") != std::string::npos);
    CHECK(comm.aborted == message);
    config.base.save_dir.clear();
    config.cuda_graph = true;
    CHECK(error_of(config, comm).find("--cuda-graph: not implemented") != std::string::npos);
    return;
  }
  const std::string message = error_of(config, comm);
  INFO(message);
  const bool names_runtime_error =
      message.find("cudaErrorInsufficientDriver") != std::string::npos ||
      message.find("cudaErrorNoDevice") != std::string::npos;
  CHECK(names_runtime_error);
  CHECK(message.find(q.message) != std::string::npos);  // quotes query_devices()
  CHECK(comm.aborted == message);
}
