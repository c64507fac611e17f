// engine/cuda/comm on any machine: the argument checks shared by the device
// communicators (exact messages), NCCL's version, and construction: without
// a driver NcclCommunicator and EmulatedCommunicator throw a CudaError naming
// the runtime error; with a device they start and refuse i64 by name.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/comm/collective_args.h"
#include "engine/cuda/comm/emulated_communicator.h"
#include "engine/cuda/comm/nccl_communicator.h"
#include "engine/cuda/device_query.h"
#include "engine/launch/launch.h"

using namespace shardscope;
using namespace shardscope::engine::cuda;
using engine::comm::CommError;
using engine::comm::Group;
using namespace std::chrono_literals;

namespace {

bool have_device() {
  const DeviceQuery query = query_devices();
  return query.ok && query.device_count > 0;
}

bool names_missing_driver(const std::string& message) {
  return message.find("cudaErrorInsufficientDriver") != std::string::npos ||
         message.find("cudaErrorNoDevice") != std::string::npos;
}

template <typename Error, typename F>
std::string error_of(F&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error of the expected type)";
}

const std::vector<Group> kGroups = {
    {"world", {0, 1, 2, 3}}, {"shard0", {0, 1}}, {"shard1", {2, 3}}};

int64_t fixed_20ms(CollectiveKind, uint64_t, const Group&) {
  return 20'000'000;
}

}  // namespace

TEST_CASE("collective args: member index, non-member and out-of-range groups name the group") {
  CHECK(member_index(kGroups, 0, 3, "nccl", "all_gather") == 3);
  CHECK(member_index(kGroups, 2, 3, "nccl", "all_gather") == 1);
  CHECK(error_of<CommError>([] { member_index(kGroups, 2, 1, "nccl", "all_gather"); }) ==
        "nccl all_gather: rank 1: not a member of group 'shard1' (ranks 2, 3)");
  CHECK(error_of<CommError>([] { member_index(kGroups, 3, 0, "emulated", "all_reduce"); }) ==
        "emulated all_reduce: rank 0: group index 3 is out of range (3 groups)");
  CHECK(error_of<CommError>([] { member_index(kGroups, -1, 0, "nccl", "broadcast"); }) ==
        "nccl broadcast: rank 0: group index -1 is out of range (3 groups)");
  CHECK(root_index(kGroups, 2, 3, 2, "nccl", "broadcast") == 1);
  CHECK(error_of<CommError>([] { root_index(kGroups, 1, 2, 0, "nccl", "broadcast"); }) ==
        "nccl broadcast: rank 0: root 2 is not a member of group 'shard0' (ranks 0, 1)");
}

TEST_CASE("collective args: only f32, bf16 and f16 are moved, i64 is named") {
  CHECK_NOTHROW(require_collective_dtype(plan::DType::f32, 0, "nccl", "all_gather"));
  CHECK_NOTHROW(require_collective_dtype(plan::DType::bf16, 0, "nccl", "all_gather"));
  CHECK_NOTHROW(require_collective_dtype(plan::DType::f16, 0, "nccl", "all_gather"));
  CHECK(error_of<CommError>([] {
          require_collective_dtype(plan::DType::i64, 2, "nccl", "all_gather");
        }) == "nccl all_gather: rank 2: dtype i64 is not supported (f32, bf16, f16)");
  CHECK_THAT(error_of<CommError>([] {
               require_collective_dtype(plan::DType::f64, 0, "emulated", "reduce_scatter");
             }),
             Catch::Contains("dtype f64 is not supported"));
  CHECK(collective_bytes(1000, plan::DType::bf16, 0, "nccl", "all_gather") == 2000);
  CHECK_THAT(error_of<CommError>(
                 [] { collective_bytes(SIZE_MAX / 2, plan::DType::f32, 0, "nccl", "all_gather"); }),
             Catch::Contains("overflows a byte count"));
}

TEST_CASE("collective args: groups are checked at construction, naming the group") {
  CHECK_NOTHROW(validate_groups(kGroups, 4, 0, "nccl"));
  CHECK(error_of<CommError>([] { validate_groups(kGroups, 2, 0, "nccl"); }) ==
        "nccl communicator: rank 0: group 'world' names rank 2, outside the world of 2");
  CHECK(error_of<CommError>([] {
          validate_groups({{"g", {1, 0}}}, 2, 0, "nccl");
        }) == "nccl communicator: rank 0: group 'g' ranks are not ascending and distinct (1, 0)");
  CHECK(error_of<CommError>([] {
          validate_groups({{"empty", {}}}, 2, 0, "emulated");
        }) == "emulated communicator: rank 0: group 'empty' has no ranks");
  CHECK(error_of<CommError>([] { validate_groups(kGroups, 4, 4, "nccl"); }) ==
        "nccl communicator: rank 4: rank is outside the world of 4");
}

TEST_CASE("nccl: version comes from the library without a device") {
  CHECK_THAT(NcclCommunicator::version(), Catch::StartsWith("NCCL 2."));
}

TEST_CASE("nccl communicator: no driver is a CudaError, with a device i64 is refused by name") {
  engine::launch::TcpStoreServer server("127.0.0.1", 0, "cuda-comm-nodevice", 1);
  engine::launch::TcpStore store("127.0.0.1", server.port(), "cuda-comm-nodevice", 1, 0, 10s);
  // Bad groups are refused before any CUDA call, on every machine.
  CHECK_THAT(error_of<CommError>([&] {
               NcclCommunicator bad(0, 1, {{"other", {1}}}, store, 10s);
             }),
             Catch::Contains("group 'other' names rank 1, outside the world of 1"));
  if (have_device()) {
    NcclCommunicator comm(0, 1, {{"world", {0}}}, store, 30s);
    CHECK(error_of<CommError>([&] {
            comm.all_gather(0, nullptr, nullptr, 4, plan::DType::i64, nullptr);
          }) == "nccl all_gather: rank 0: dtype i64 is not supported (f32, bf16, f16)");
  } else {
    const std::string message = error_of<CudaError>([&] {
      NcclCommunicator comm(0, 1, {{"world", {0}}}, store, 10s);
    });
    INFO(message);
    CHECK(names_missing_driver(message));
  }
}

TEST_CASE("emulated communicator: no driver is a CudaError, with a device i64 is refused") {
  CHECK_THAT(error_of<CommError>([] { EmulatedCommunicator bad(0, 4, kGroups, nullptr); }),
             Catch::Contains("no duration model given"));
  CHECK_THAT(error_of<CommError>([] { EmulatedCommunicator bad(5, 4, kGroups, fixed_20ms); }),
             Catch::Contains("rank is outside the world of 4"));
  if (have_device()) {
    EmulatedCommunicator comm(1, 4, kGroups, fixed_20ms);
    CHECK(error_of<CommError>([&] {
            comm.all_gather(0, nullptr, nullptr, 4, plan::DType::i64, nullptr);
          }) == "emulated all_gather: rank 1: dtype i64 is not supported (f32, bf16, f16)");
    CHECK(comm.issued().empty());
  } else {
    const std::string message =
        error_of<CudaError>([] { EmulatedCommunicator comm(1, 4, kGroups, fixed_20ms); });
    INFO(message);
    CHECK(names_missing_driver(message));
  }
}
