// Argument checks of the mixture-of-experts launchers (engine/cuda/ops/moe.cu)
// on machines without a GPU or driver: each call throws std::invalid_argument
// naming the function and the argument before any CUDA call (a CUDA call here
// would fail with CudaError instead). Also the combine's workspace size.
#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>

#include "engine/cuda/ops/ops.h"
#include "tests/engine/cuda/fake_device_ptrs.h"

namespace shardscope::engine::cuda {
namespace {

using Catch::Contains;
using plan::DType;

using namespace test;  // fake device addresses (fake_device_ptrs.h)

}  // namespace

TEST_CASE("moe router launchers reject k outside [1, experts], null indices and a bad seq") {
  CHECK_THROWS_WITH(moe_router_forward(kStream, f32(1), f32(2), i64(3), f32(4), 8, 4, 5, false,
                                       nullptr, 8, nullptr),
                    "moe_router_forward: needs 1 <= k <= experts, got k = 5, experts = 4");
  CHECK_THROWS_WITH(moe_router_forward(kStream, f32(1), f32(2), nullptr, f32(4), 8, 4, 2, false,
                                       nullptr, 8, nullptr),
                    Contains("moe_router_forward: indices is null but 16 elements"));
  CHECK_THROWS_WITH(moe_router_forward(kStream, f32(1), f32(2), i64(3), f32(4), 8, 4, 2, false,
                                       i64(5), 3, nullptr),
                    Contains("moe_router_forward: seq = 3 does not divide n = 8"));
  CHECK_THROWS_WITH(moe_router_forward(kStream, DevPtr{fake(1), DType::i64}, f32(2), i64(3), f32(4),
                                       8, 4, 2, false, nullptr, 8, nullptr),
                    Contains("moe_router_forward: logits") && Contains("i64"));
  CHECK_THROWS_WITH(moe_router_backward(kStream, f32(1), i64(2), f32(3), f32(4), -1, 4, 2, true),
                    "moe_router_backward: n = -1 is negative");
  CHECK_THROWS_WITH(moe_router_backward(kStream, f32(1), i64(2), DevPtr{}, f32(4), 8, 4, 2, true),
                    Contains("moe_router_backward: dweights is null but 16 elements"));
}

TEST_CASE("moe dispatch launchers reject a seq that does not divide the tokens and null slots") {
  CHECK_THROWS_WITH(moe_dispatch_forward(kStream, f32(1), i64(2), f32(3), i64(4), 10, 4, 8, 2, 0, 5,
                                         true, nullptr),
                    "moe_dispatch_forward: seq = 4 does not divide tokens = 10");
  CHECK_THROWS_WITH(moe_dispatch_forward(kStream, f32(1), i64(2), f32(3), nullptr, 8, 4, 8, 2, 0, 5,
                                         true, nullptr),
                    Contains("moe_dispatch_forward: slots is null but 5 elements"));
  CHECK_THROWS_WITH(moe_dispatch_forward(kStream, f32(1), i64(2), f32(3), i64(4), 8, 4, 8, 0, 0, 5,
                                         true, nullptr),
                    "moe_dispatch_forward: k = 0 < 1");
  CHECK_THROWS_WITH(moe_dispatch_backward(kStream, f32(1), i64(2), f32(3), -2, 8, 2, 8),
                    "moe_dispatch_backward: rows = -2 is negative");
}

TEST_CASE("moe combine accumulates a 16-bit output in an fp32 workspace of tokens * c floats") {
  CHECK(moe_combine_forward_workspace_bytes(DType::f32, 12, 64) == 0);
  CHECK(moe_combine_forward_workspace_bytes(DType::bf16, 12, 64) == 12 * 64 * 4);
  CHECK(moe_combine_forward_workspace_bytes(DType::f16, 3, 5) == 60);
  const ConstDevPtr y[2] = {f32(1), f32(2)};
  const int64_t* slots[2] = {i64(3), i64(4)};
  const int64_t rows[2] = {6, 6};
  CHECK_THROWS_WITH(moe_combine_forward(kStream, y, slots, rows, 2, f32(5), bf16(6), 6, 8, 2,
                                        nullptr, Workspace{fake(7), 100}),
                    Contains("moe_combine_forward: workspace of 100 bytes") &&
                        Contains("smaller than the 192 bytes"));
  const int64_t bad_rows[2] = {6, -1};
  CHECK_THROWS_WITH(moe_combine_forward(kStream, y, slots, bad_rows, 2, f32(5), f32(6), 6, 8, 2,
                                        nullptr, Workspace{}),
                    "moe_combine_forward: rows = -1 is negative");
  const DevPtr dy[2] = {f32(8), DevPtr{}};
  CHECK_THROWS_WITH(
      moe_combine_backward(kStream, y, slots, rows, 2, f32(5), f32(6), dy, f32(9), 6, 8, 2),
      Contains("moe_combine_backward: dy is null but 48 elements"));
}

TEST_CASE("sigmoid gate launchers reject negative sizes and null operands") {
  CHECK_THROWS_WITH(sigmoid_gate_forward(kStream, f32(1), f32(2), f32(3), f32(4), -1, 8),
                    "sigmoid_gate_forward: n = -1 is negative");
  CHECK_THROWS_WITH(sigmoid_gate_forward(kStream, f32(1), f32(2), f32(3), DevPtr{}, 4, 8),
                    Contains("sigmoid_gate_forward: sig is null but 4 elements"));
  CHECK_THROWS_WITH(sigmoid_gate_backward(kStream, f32(1), f32(2), f32(3), f32(4), DevPtr{}, 4, 8),
                    Contains("sigmoid_gate_backward: dx is null but 32 elements"));
}

}  // namespace shardscope::engine::cuda
