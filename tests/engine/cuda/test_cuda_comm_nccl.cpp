// GPU tests of NcclCommunicator at world size 1 (the real NCCL path on one
// GPU; the TCP store runs in this process): every collective on f32 and bf16
// gives exactly its input back (one member), recv buffers are really written,
// membership and abort errors name the rank and the group.
#include <catch2/catch.hpp>

#include <chrono>

#include "engine/cuda/comm/nccl_communicator.h"
#include "engine/launch/launch.h"
#include "tests/engine/cuda/test_cuda_comm_util.h"

using namespace shardscope;
using namespace shardscope::engine::cuda;
using namespace shardscope::engine::cuda::test;
using engine::comm::CommError;
using engine::comm::ReduceOp;
using namespace std::chrono_literals;

namespace {

constexpr size_t kCount = 1000;

struct World1 {
  engine::launch::TcpStoreServer server{"127.0.0.1", 0, "cuda-comm-nccl", 1};
  engine::launch::TcpStore store{"127.0.0.1", server.port(), "cuda-comm-nccl", 1, 0, 10s};
  NcclCommunicator comm{0, 1, {{"world", {0}}}, store, 60s};
};

// Values i/4 - 100: exact in f32 and bf16 (at most 9 significant bits), distinct.
std::vector<float> pattern_f32() {
  std::vector<float> values(kCount);
  for (size_t i = 0; i < kCount; ++i) values[i] = static_cast<float>(i) / 4.0f - 100.0f;
  return values;
}

std::vector<uint16_t> pattern_bf16() {
  std::vector<uint16_t> values;
  for (float v : pattern_f32()) values.push_back(exact_bf16(v));
  return values;
}

// Sentinel for outputs: NaN bits in both types, never equal to the pattern.
template <typename T>
std::vector<T> sentinel() {
  return std::vector<T>(kCount, static_cast<T>(~T{0}));
}
template <>
std::vector<float> sentinel<float>() {
  return std::vector<float>(kCount, -12345.0f);
}

template <typename T>
void check_all_collectives(NcclCommunicator& comm, const std::vector<T>& input, plan::DType dt) {
  Stream stream;
  DeviceVector<T> send(input);
  {
    DeviceVector<T> recv(sentinel<T>());
    comm.all_gather(0, send.get(), recv.get(), kCount, dt, stream.s);
    SS_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    CHECK(recv.read() == input);
  }
  {
    DeviceVector<T> data(input);  // in place: send is recv's own slot
    comm.all_gather(0, data.get(), data.get(), kCount, dt, stream.s);
    SS_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    CHECK(data.read() == input);
  }
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
    INFO((op == ReduceOp::sum ? "sum" : "avg"));
    DeviceVector<T> recv(sentinel<T>());
    comm.reduce_scatter(0, send.get(), recv.get(), kCount, dt, op, stream.s);
    DeviceVector<T> reduced(input);
    comm.all_reduce(0, reduced.get(), kCount, dt, op, stream.s);
    SS_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    CHECK(recv.read() == input);  // one member: the sum is x, the avg x / 1
    CHECK(reduced.read() == input);
  }
  {
    DeviceVector<T> data(input);
    comm.broadcast(0, data.get(), data.bytes(), 0, stream.s);
    SS_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    CHECK(data.read() == input);
  }
}

template <typename F>
std::string comm_error_of(F&& call) {
  try {
    call();
  } catch (const CommError& e) {
    return e.what();
  }
  return "(no CommError)";
}

}  // namespace

TEST_CASE("nccl world 1: all_gather, reduce_scatter, all_reduce, broadcast on f32 and bf16") {
  World1 world;
  CHECK(world.comm.kind() == engine::cuda::CommunicatorKind::nccl);
  CHECK(world.comm.world_size() == 1);
  check_all_collectives<float>(world.comm, pattern_f32(), plan::DType::f32);
  check_all_collectives<uint16_t>(world.comm, pattern_bf16(), plan::DType::bf16);
  world.comm.barrier();
}

TEST_CASE("nccl world 1: a group index outside the groups and a non-member root are CommErrors") {
  World1 world;
  Stream stream;
  DeviceVector<float> data(pattern_f32());
  CHECK(comm_error_of([&] {
          world.comm.all_reduce(1, data.get(), kCount, plan::DType::f32, ReduceOp::sum, stream.s);
        }) == "nccl all_reduce: rank 0: group index 1 is out of range (1 groups)");
  CHECK_THAT(comm_error_of([&] { world.comm.broadcast(0, data.get(), 16, 3, stream.s); }),
             Catch::Contains("root 3 is not a member of group 'world'"));
}

TEST_CASE("nccl world 1: abort() marks the rank in the store and later calls throw") {
  World1 world;
  Stream stream;
  DeviceVector<float> data(pattern_f32());
  world.comm.abort("injected failure");
  CHECK(world.server.peek("abort/0").value_or("") == "injected failure");
  CHECK_THAT(comm_error_of([&] {
               world.comm.all_reduce(0, data.get(), kCount, plan::DType::f32, ReduceOp::sum,
                                     stream.s);
             }),
             Catch::Contains("nccl all_reduce: rank 0: aborted earlier: injected failure"));
  CHECK_THAT(comm_error_of([&] { world.comm.barrier(); }), Catch::Contains("injected failure"));
}
