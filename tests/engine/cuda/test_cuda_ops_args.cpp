// Argument validation of the CUDA op launchers, on machines without a GPU or
// driver: every call below must throw std::invalid_argument naming the
// function and the argument before it touches the CUDA runtime (a CUDA call
// here would fail with CudaError instead). Also the workspace sizes, which
// are host arithmetic computed by hand below.
#include <limits>
#include <stdexcept>

#include "engine/cuda/ops/linear_checks.h"
#include "engine/cuda/ops/ops.h"
#include "tests/engine/cuda/fake_device_ptrs.h"

namespace shardscope::engine::cuda {
namespace {

using Catch::Contains;
using plan::DType;

using namespace test;  // fake device addresses (fake_device_ptrs.h)

}  // namespace

TEST_CASE("elementwise launchers reject negative sizes, null operands and integer dtypes") {
  CHECK_THROWS_WITH(cast(kStream, f32(1), bf16(2), -1),
                    Contains("cast") && Contains("n = -1 is negative"));
  CHECK_THROWS_WITH(cast(kStream, ConstDevPtr(fake(1), DType::i64), f32(2), 4),
                    Contains("cast: src") && Contains("i64"));
  CHECK_THROWS_WITH(cast(kStream, f32(1), DevPtr{nullptr, DType::f32}, 4),
                    Contains("cast") && Contains("dst is null"));
  CHECK_THROWS_WITH(add_inplace(kStream, ConstDevPtr(), f32(2), 3),
                    Contains("add_inplace") && Contains("src is null"));
  CHECK_THROWS_WITH(scale_inplace(kStream, DevPtr{fake(1), DType::i32}, 3, 2.0f, nullptr),
                    Contains("scale_inplace: x") && Contains("i32"));
  CHECK_THROWS_WITH(gelu_forward(kStream, f32(1), f32(2), -5, true), Contains("gelu_forward"));
  CHECK_THROWS_WITH(gelu_backward(kStream, f32(1), f32(2), DevPtr{}, 8, false),
                    Contains("gelu_backward") && Contains("dx is null"));
  CHECK_THROWS_WITH(relu_forward(kStream, ConstDevPtr(), f32(2), 8),
                    Contains("relu_forward") && Contains("x is null"));
  CHECK_THROWS_WITH(relu_backward(kStream, f32(1), ConstDevPtr(fake(2), DType::f64), f32(3), 8),
                    Contains("relu_backward: dy") && Contains("f64"));
  CHECK_THROWS_WITH(swiglu_forward(kStream, f32(1), f32(2), DevPtr{}, 8),
                    Contains("swiglu_forward") && Contains("y is null"));
  CHECK_THROWS_WITH(swiglu_backward(kStream, f32(1), f32(2), f32(3), DevPtr{}, f32(5), 8),
                    Contains("swiglu_backward") && Contains("dgate is null"));
  CHECK_THROWS_AS(cast(kStream, f32(1), bf16(2), -1), std::invalid_argument);
}

TEST_CASE("elementwise launchers with n = 0 return without a CUDA call") {
  // With no driver here, any CUDA call would throw CudaError.
  CHECK_NOTHROW(cast(kStream, ConstDevPtr(), DevPtr{}, 0));
  CHECK_NOTHROW(gelu_forward(kStream, ConstDevPtr(), DevPtr{}, 0, true));
  CHECK_NOTHROW(add_inplace(kStream, ConstDevPtr(), DevPtr{}, 0));
}

TEST_CASE("residual launchers reject a b_n that does not divide n and a small workspace") {
  CHECK_THROWS_WITH(residual_forward(kStream, f32(1), f32(2), f32(3), 10, 4),
                    Contains("residual_forward") && Contains("b_n = 4 does not divide n = 10"));
  CHECK_THROWS_WITH(residual_forward(kStream, f32(1), f32(2), f32(3), 10, 0), Contains("b_n = 0"));
  // 64 rows of 24: two row chunks of partial sums, 2 * 24 floats.
  REQUIRE(residual_backward_workspace_bytes(64 * 24, 24) == 2 * 24 * 4);
  CHECK_THROWS_WITH(residual_backward(kStream, f32(1), f32(2), f32(3), 64 * 24, 24,
                                      Workspace{fake(9), 2 * 24 * 4 - 1}),
                    Contains("residual_backward") && Contains("workspace of 191 bytes"));
  CHECK_THROWS_WITH(
      residual_backward(kStream, f32(1), f32(2), f32(3), 64 * 24, 24, Workspace{nullptr, 0}),
      Contains("(null)"));
}

TEST_CASE("norm launchers reject bad shapes, eps, null statistics and a small workspace") {
  CHECK_THROWS_WITH(
      layernorm_forward(kStream, f32(1), f32(2), f32(3), f32(4), fptr(5), fptr(6), 4, 0, 1e-5),
      Contains("layernorm_forward") && Contains("c = 0 < 1"));
  CHECK_THROWS_WITH(
      layernorm_forward(kStream, f32(1), f32(2), f32(3), f32(4), fptr(5), fptr(6), 4, 8, -1.0),
      Contains("layernorm_forward") && Contains("eps < 0"));
  CHECK_THROWS_WITH(
      layernorm_forward(kStream, f32(1), f32(2), f32(3), f32(4), nullptr, fptr(6), 4, 8, 1e-5),
      Contains("mean is null"));
  CHECK_THROWS_WITH(rmsnorm_forward(kStream, f32(1), ConstDevPtr(), f32(3), fptr(4), 4, 8, 1e-5),
                    Contains("rmsnorm_forward") && Contains("w is null"));
  // 100 rows: 4 chunks of 25; layernorm keeps dw and db partials.
  REQUIRE(layernorm_backward_workspace_bytes(100, 8) == 2 * 4 * 8 * 4);
  REQUIRE(rmsnorm_backward_workspace_bytes(100, 8) == 4 * 8 * 4);
  REQUIRE(layernorm_backward_workspace_bytes(32, 8) == 0);  // one chunk: no partials
  CHECK_THROWS_WITH(layernorm_backward(kStream, f32(1), f32(2), fptr(3), fptr(4), f32(5), f32(6),
                                       f32(7), f32(8), 100, 8, Workspace{fake(9), 255}),
                    Contains("layernorm_backward") && Contains("256 bytes"));
  CHECK_THROWS_WITH(layernorm_backward(kStream, f32(1), f32(2), fptr(3), fptr(4), f32(5), f32(6),
                                       DevPtr{}, f32(8), 10, 8, Workspace{}),
                    Contains("layernorm_backward") && Contains("dw is null"));
  CHECK_THROWS_WITH(rmsnorm_backward(kStream, f32(1), f32(2), fptr(3), f32(4), f32(5), f32(6), 100,
                                     8, Workspace{fake(9), 64}),
                    Contains("rmsnorm_backward") && Contains("128 bytes"));
}

TEST_CASE("embedding launchers reject positions past the table and a small workspace") {
  CHECK_THROWS_WITH(embedding_forward(kStream, nullptr, f32(1), f32(2), 9, 8, 4, nullptr),
                    Contains("embedding_forward") && Contains("table has 8 rows"));
  CHECK_THROWS_WITH(embedding_forward(kStream, nullptr, f32(1), f32(2), 4, 8, -4, nullptr),
                    Contains("dim = -4 is negative"));
  CHECK_THROWS_WITH(embedding_forward(kStream, nullptr, ConstDevPtr(), f32(2), 4, 8, 4, nullptr),
                    Contains("table is null"));
  // Owner table of 10 uint32 (rounded up to 256 bytes) + 3 x 4 fp32 accumulators.
  REQUIRE(embedding_backward_workspace_bytes(3, 10, 4) == 256 + 3 * 4 * 4);
  const auto* ids = static_cast<const int64_t*>(fake(7));
  CHECK_THROWS_WITH(embedding_backward(kStream, ids, bf16(1), bf16(2), 3, 10, 4, Workspace{}),
                    Contains("embedding_backward") && Contains("workspace"));
}

TEST_CASE("cross entropy launchers reject empty shapes, null pointers and a small workspace") {
  const auto* labels = static_cast<const int64_t*>(fake(3));
  auto* loss = static_cast<double*>(fake(4));
  REQUIRE(cross_entropy_forward_workspace_bytes(5, 7) == 5 * 8);
  CHECK_THROWS_WITH(cross_entropy_forward(kStream, f32(1), labels, f32(2), 0, 7, loss, nullptr,
                                          Workspace{fake(5), 64}),
                    Contains("cross_entropy_forward") && Contains("n = 0 rows"));
  CHECK_THROWS_WITH(cross_entropy_forward(kStream, f32(1), nullptr, f32(2), 5, 7, loss, nullptr,
                                          Workspace{fake(5), 64}),
                    Contains("labels is null"));
  CHECK_THROWS_WITH(cross_entropy_forward(kStream, f32(1), labels, f32(2), 5, 7, nullptr, nullptr,
                                          Workspace{fake(5), 64}),
                    Contains("loss_acc is null"));
  CHECK_THROWS_WITH(cross_entropy_forward(kStream, f32(1), labels, f32(2), 5, 7, loss, nullptr,
                                          Workspace{fake(5), 39}),
                    Contains("40 bytes"));
  CHECK_THROWS_WITH(cross_entropy_backward(kStream, f32(1), labels, 1.0f, f32(2), 5, 0),
                    Contains("cross_entropy_backward") && Contains("v = 0 < 1"));
  // A padded vocabulary's valid columns: in [1, v].
  CHECK_THROWS_WITH(
      cross_entropy_forward(kStream, f32(1), labels, f32(2), 5, 7, loss, nullptr,
                            Workspace{fake(5), 64}, 8),
      Contains("cross_entropy_forward") && Contains("valid = 8") && Contains("[1, v = 7]"));
  CHECK_THROWS_WITH(cross_entropy_backward(kStream, f32(1), labels, 1.0f, f32(2), 5, 7, 0),
                    Contains("cross_entropy_backward") && Contains("valid = 0"));
}

TEST_CASE("optimizer launchers reject bad hyperparameters, steps and missing state") {
  cpu::AdamWParams adamw;
  CHECK_THROWS_WITH(
      adamw_step(kStream, fptr(1), f32(2), fptr(3), fptr(4), 8, adamw, 0, nullptr, nullptr),
      Contains("adamw_step") && Contains("step = 0 < 1"));
  adamw.beta1 = 1.0;
  CHECK_THROWS_WITH(
      adamw_step(kStream, fptr(1), f32(2), fptr(3), fptr(4), 8, adamw, 1, nullptr, nullptr),
      Contains("beta1"));
  CHECK_THROWS_WITH(adamw_step(kStream, fptr(1), f32(2), nullptr, fptr(4), 8, cpu::AdamWParams{}, 1,
                               nullptr, nullptr),
                    Contains("adamw_step") && Contains("m is null"));
  CHECK_THROWS_WITH(adamw_step(kStream, fptr(1), ConstDevPtr(fake(2), DType::i64), fptr(3), fptr(4),
                               8, cpu::AdamWParams{}, 1, nullptr, nullptr),
                    Contains("adamw_step: g") && Contains("i64"));
  cpu::SgdParams sgd;
  sgd.momentum = 0.9;
  CHECK_THROWS_WITH(sgd_step(kStream, fptr(1), f32(2), nullptr, 8, sgd, 1, nullptr, nullptr),
                    Contains("sgd_step") && Contains("buf (momentum > 0) is null"));
  sgd.momentum = -0.5;
  CHECK_THROWS_WITH(sgd_step(kStream, fptr(1), f32(2), fptr(3), 8, sgd, 1, nullptr, nullptr),
                    Contains("momentum") && Contains("< 0"));
  // 4096 elements per block: 4097 elements take two partial sums.
  REQUIRE(squared_norm_workspace_bytes(4096) == 8);
  REQUIRE(squared_norm_workspace_bytes(4097) == 16);
  REQUIRE(squared_norm_workspace_bytes(0) == 0);
  CHECK_THROWS_WITH(squared_norm_accumulate(kStream, f32(1), 4097, static_cast<double*>(fake(2)),
                                            Workspace{fake(3), 8}),
                    Contains("squared_norm_accumulate") && Contains("16 bytes"));
  CHECK_THROWS_WITH(inf_check(kStream, f32(1), 8, nullptr),
                    Contains("inf_check") && Contains("flag is null"));
  const auto* norm_sq = static_cast<const double*>(fake(1));
  CHECK_THROWS_WITH(clip_factor(kStream, norm_sq, 0.0, fptr(2)),
                    Contains("clip_factor") && Contains("max_norm"));
  CHECK_THROWS_WITH(
      clip_factor(kStream, norm_sq, std::numeric_limits<double>::quiet_NaN(), fptr(2)),
      Contains("max_norm"));
  CHECK_THROWS_WITH(clip_factor(kStream, norm_sq, 1.0, nullptr), Contains("factor is null"));
}

TEST_CASE("linear argument checks reject mixed dtypes, null operands and a small workspace") {
  using detail::check_linear_backward;
  using detail::check_linear_forward;
  CHECK_THROWS_WITH(
      check_linear_forward(bf16(1), f32(2), ConstDevPtr(), bf16(3), 4, 8, 16),
      Contains("linear_forward") && Contains("x dtype bf16 differs from w dtype f32"));
  CHECK_THROWS_WITH(check_linear_forward(f32(1), f32(2), ConstDevPtr(), bf16(3), 4, 8, 16),
                    Contains("linear_forward") && Contains("y dtype bf16"));
  CHECK_THROWS_WITH(check_linear_forward(f32(1), ConstDevPtr(), ConstDevPtr(), f32(3), 4, 8, 16),
                    Contains("w is null"));
  CHECK_THROWS_WITH(check_linear_forward(f32(1), f32(2), ConstDevPtr(), f32(3), -4, 8, 16),
                    Contains("n = -4 is negative"));
  CHECK_THROWS_WITH(
      check_linear_forward(f32(1), f32(2), ConstDevPtr(fake(4), DType::i64), f32(3), 4, 8, 16),
      Contains("linear_forward: bias") && Contains("i64"));
  CHECK_NOTHROW(check_linear_forward(bf16(1), bf16(2), f32(4), f32(3), 4, 8, 16));
  CHECK_THROWS_WITH(check_linear_backward(bf16(1), bf16(2), f32(3), bf16(4), bf16(5), DevPtr{}, 4,
                                          8, 16, nullptr, 0),
                    Contains("linear_backward") && Contains("differ"));
  CHECK_THROWS_WITH(check_linear_backward(bf16(1), bf16(2), bf16(3), DevPtr{fake(4), DType::f16},
                                          bf16(5), DevPtr{}, 4, 8, 16, nullptr, 0),
                    Contains("linear_backward") && Contains("dx dtype f16"));
  CHECK_THROWS_WITH(check_linear_backward(f32(1), f32(2), f32(3), DevPtr{}, DevPtr{}, DevPtr{}, 4,
                                          8, 16, nullptr, 0),
                    Contains("dw is null"));
  // 70 rows of bias gradient: 3 chunks of 16 columns.
  REQUIRE(linear_backward_workspace_bytes(70, 8, 16) == 3 * 16 * 4);
  CHECK_THROWS_WITH(check_linear_backward(f32(1), f32(2), f32(3), DevPtr{}, f32(5), f32(6), 70, 8,
                                          16, fake(7), 3 * 16 * 4 - 4),
                    Contains("linear_backward") && Contains("192 bytes"));
  CHECK_NOTHROW(check_linear_backward(f32(1), f32(2), f32(3), DevPtr{}, f32(5), DevPtr{}, 70, 8, 16,
                                      nullptr, 0));  // no dbias: no workspace needed
}

TEST_CASE("gated, scale and softcap launchers reject a short stride, null operands and a bad cap") {
  using cpu::GateActivation;
  // Phi-3's packed gate_up: stride 2F; a stride below the width overlaps rows.
  CHECK_THROWS_WITH(
      gated_forward(kStream, f32(1), f32(2), f32(3), 4, 8, 7, GateActivation::gelu_tanh),
      Contains("gated_forward") && Contains("stride 7 < width 8"));
  CHECK_THROWS_WITH(gated_forward(kStream, f32(1), f32(2), f32(3), -1, 8, 8, GateActivation::gelu),
                    Contains("gated_forward") && Contains("rows = -1 is negative"));
  CHECK_THROWS_WITH(
      gated_forward(kStream, f32(1), ConstDevPtr(), f32(3), 4, 8, 16, GateActivation::silu),
      Contains("gated_forward") && Contains("up is null but 56 elements are needed"));
  CHECK_THROWS_WITH(gated_backward(kStream, f32(1), f32(2), f32(3), f32(4), DevPtr{}, 4, 8, 16,
                                   GateActivation::gelu),
                    Contains("gated_backward") && Contains("dup is null"));
  CHECK_THROWS_WITH(gated_backward(kStream, f32(1), f32(2), ConstDevPtr(fake(3), DType::i64),
                                   f32(4), f32(5), 4, 8, 16, GateActivation::gelu),
                    Contains("gated_backward: dy") && Contains("i64"));
  CHECK_THROWS_WITH(scale_forward(kStream, f32(1), f32(2), -3, 2.0f),
                    Contains("scale_forward") && Contains("n = -3 is negative"));
  CHECK_THROWS_WITH(scale_backward(kStream, f32(1), DevPtr{}, 3, 2.0f),
                    Contains("scale_backward") && Contains("dx is null"));
  CHECK_THROWS_WITH(softcap_forward(kStream, f32(1), f32(2), f32(3), 8, 0.0f),
                    Contains("softcap_forward") && Contains("must be finite and > 0"));
  CHECK_THROWS_WITH(
      softcap_forward(kStream, f32(1), f32(2), f32(3), 8, std::numeric_limits<float>::infinity()),
      Contains("softcap_forward") && Contains("must be finite and > 0"));
  CHECK_THROWS_WITH(softcap_forward(kStream, f32(1), f32(2), DevPtr{}, 8, 30.0f),
                    Contains("softcap_forward") && Contains("th is null"));
  CHECK_THROWS_WITH(softcap_backward(kStream, ConstDevPtr(), f32(2), f32(3), 8),
                    Contains("softcap_backward") && Contains("th is null"));
  // No elements: no launch, so no CUDA call (none would work here).
  CHECK_NOTHROW(gated_forward(kStream, ConstDevPtr(), ConstDevPtr(), DevPtr{}, 0, 8, 16,
                              GateActivation::gelu));
  CHECK_NOTHROW(gated_backward(kStream, f32(1), f32(2), f32(3), f32(4), f32(5), 3, 0, 0,
                               GateActivation::gelu));
  CHECK_NOTHROW(softcap_forward(kStream, ConstDevPtr(), DevPtr{}, DevPtr{}, 0, 30.0f));
}

TEST_CASE("rmsnorm rejects a non-finite weight_offset, embedding a padding_idx outside the table") {
  CHECK_THROWS_WITH(rmsnorm_forward(kStream, f32(1), f32(2), f32(3), fptr(4), 4, 8, 1e-6,
                                    std::numeric_limits<double>::quiet_NaN()),
                    Contains("rmsnorm_forward") && Contains("weight_offset = nan is not finite"));
  CHECK_THROWS_WITH(rmsnorm_backward(kStream, f32(1), f32(2), fptr(3), f32(4), f32(5), f32(6), 4, 8,
                                     Workspace{}, std::numeric_limits<double>::infinity()),
                    Contains("rmsnorm_backward") && Contains("weight_offset = inf is not finite"));
  const auto* ids = static_cast<const int64_t*>(fake(7));
  CHECK_THROWS_WITH(
      embedding_backward(kStream, ids, f32(1), f32(2), 3, 10, 4, Workspace{}, 10),
      Contains("embedding_backward") && Contains("padding_idx 10 is not -1 or a row of 10"));
  CHECK_THROWS_WITH(embedding_backward(kStream, ids, f32(1), f32(2), 3, 10, 4, Workspace{}, -2),
                    Contains("padding_idx -2"));
  // A valid padding row with no rows to add: returns before any CUDA call.
  CHECK_NOTHROW(embedding_backward(kStream, ids, f32(1), f32(2), 0, 10, 4, Workspace{}, 1));
}

}  // namespace shardscope::engine::cuda
