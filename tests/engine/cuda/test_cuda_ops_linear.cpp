// linear_forward / linear_backward (cuBLASLt) against cpu::linear_* on the
// same (dtype-rounded) inputs: both weight layouts, with and without bias,
// f32 / bf16 / f16, odd shapes, gradients pre-filled so that accumulation is
// checked, operands that are not 16-byte aligned.
#include <cmath>
#include <stdexcept>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/ops.h"
#include "tests/engine/cuda/cuda_ops_test_util.h"

namespace shardscope::engine::cuda::test {
namespace {

using cpu::WeightLayout;

struct LinearCase {
  int64_t n, in, out;
  WeightLayout layout;
  DType dt;                    // x, w, y, dy, dx, dw
  bool bias;                   // with a bias (forward) / dbias (backward)
  DType bias_dt = DType::f32;  // dtype of bias and dbias
  int64_t pad = 0;             // elements in front of every operand (misalignment)
};

const char* layout_name(WeightLayout l) {
  return l == WeightLayout::out_in ? "out_in" : "in_out";
}

void check_linear_forward(Blas& blas, const LinearCase& c, uint32_t seed) {
  INFO("forward n " << c.n << " in " << c.in << " out " << c.out << " " << layout_name(c.layout)
                    << " " << dtype_label(c.dt) << " bias " << c.bias << " "
                    << dtype_label(c.bias_dt) << " pad " << c.pad);
  std::mt19937 rng(seed);
  const FVec x = random_values(rng, c.n * c.in, c.dt);
  const FVec w = random_values(rng, c.in * c.out, c.dt);
  const FVec b = c.bias ? random_values(rng, c.out, c.bias_dt) : FVec();
  FVec ref(static_cast<size_t>(c.n * c.out));
  cpu::linear_forward(x.data(), w.data(), c.bias ? b.data() : nullptr, ref.data(), c.n, c.in, c.out,
                      c.layout);

  Stream s;
  const DeviceArray dx_(x, c.dt, c.pad), dw_(w, c.dt, c.pad);
  const DeviceArray db_ = c.bias ? DeviceArray(b, c.bias_dt, c.pad) : DeviceArray();
  // y starts as garbage (random): the forward overwrites it.
  DeviceArray dy_(random_values(rng, c.n * c.out, c.dt), c.dt, c.pad);
  linear_forward(blas, s.get(), dx_.cptr(), dw_.cptr(), c.bias ? db_.cptr() : ConstDevPtr(),
                 dy_.ptr(), c.n, c.in, c.out, c.layout);
  s.sync();
  check_close(dy_.download(), ref, tol_for(c.dt, std::sqrt(static_cast<double>(c.in) + 1.0)), "y");
}

void check_linear_backward(Blas& blas, const LinearCase& c, bool with_dx, uint32_t seed) {
  INFO("backward n " << c.n << " in " << c.in << " out " << c.out << " " << layout_name(c.layout)
                     << " " << dtype_label(c.dt) << " dbias " << c.bias << " "
                     << dtype_label(c.bias_dt) << " dx " << with_dx << " pad " << c.pad);
  std::mt19937 rng(seed);
  const FVec x = random_values(rng, c.n * c.in, c.dt);
  const FVec w = random_values(rng, c.in * c.out, c.dt);
  const FVec dy = random_values(rng, c.n * c.out, c.dt);
  const FVec dx0 = random_values(rng, c.n * c.in, c.dt);
  const FVec dw0 = random_values(rng, c.in * c.out, c.dt);
  const FVec db0 = random_values(rng, c.out, c.bias_dt);
  FVec dx_ref = dx0, dw_ref = dw0, db_ref = db0;
  cpu::linear_backward(x.data(), w.data(), dy.data(), with_dx ? dx_ref.data() : nullptr,
                       dw_ref.data(), c.bias ? db_ref.data() : nullptr, c.n, c.in, c.out, c.layout);

  Stream s;
  const DeviceArray x_d(x, c.dt, c.pad), w_d(w, c.dt, c.pad), dy_d(dy, c.dt, c.pad);
  DeviceArray dx_d(dx0, c.dt, c.pad), dw_d(dw0, c.dt, c.pad), db_d(db0, c.bias_dt, c.pad);
  const size_t ws_bytes = linear_backward_workspace_bytes(c.n, c.in, c.out);
  DeviceBuffer ws(ws_bytes);
  linear_backward(blas, s.get(), x_d.cptr(), w_d.cptr(), dy_d.cptr(),
                  with_dx ? dx_d.ptr() : DevPtr(), dw_d.ptr(), c.bias ? db_d.ptr() : DevPtr(), c.n,
                  c.in, c.out, c.layout, Workspace{ws.get(), ws_bytes});
  s.sync();
  check_close(dx_d.download(), with_dx ? dx_ref : dx0,
              tol_for(c.dt, std::sqrt(static_cast<double>(c.out) + 1.0)), "dx");
  check_close(dw_d.download(), dw_ref, tol_for(c.dt, std::sqrt(static_cast<double>(c.n) + 1.0)),
              "dw");
  check_close(db_d.download(), c.bias ? db_ref : db0,
              tol_for(c.bias_dt, std::sqrt(static_cast<double>(c.n) + 1.0)), "dbias");
}

}  // namespace

TEST_CASE("linear forward matches cpu for every layout, dtype and bias, odd and aligned shapes",
          "[gpu]") {
  Blas blas;
  uint32_t seed = 100;
  for (const DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out})
      for (const bool bias : {false, true}) {
        check_linear_forward(blas, {5, 7, 3, layout, dt, bias, dt}, ++seed);      // odd
        check_linear_forward(blas, {64, 96, 128, layout, dt, bias, dt}, ++seed);  // aligned
        check_linear_forward(blas, {1, 1, 1, layout, dt, bias, dt}, ++seed);  // n = in = out = 1
      }
}

TEST_CASE("linear forward with a bias of another dtype or misaligned operands adds the bias",
          "[gpu]") {
  Blas blas;
  // bf16 GEMM with an fp32 bias: the bias rows are written first, then beta = 1.
  check_linear_forward(blas, {33, 40, 24, WeightLayout::out_in, DType::bf16, true, DType::f32}, 1);
  // Operands one element past a 256-byte boundary: algorithms are chosen for 2-byte alignment.
  check_linear_forward(blas, {16, 32, 48, WeightLayout::in_out, DType::bf16, true, DType::bf16, 1},
                       2);
  check_linear_forward(blas, {16, 32, 48, WeightLayout::out_in, DType::f32, true, DType::f32, 1},
                       3);
}

TEST_CASE("linear forward with in = 0 writes the bias rows (an empty product)", "[gpu]") {
  Blas blas;
  Stream s;
  const FVec b{0.5f, -1.25f, 2.0f};
  const DeviceArray bias(b, DType::f32);
  DeviceArray y(FVec(6, 7.0f), DType::f32);
  linear_forward(blas, s.get(), ConstDevPtr(), ConstDevPtr(), bias.cptr(), y.ptr(), 2, 0, 3,
                 WeightLayout::out_in);
  s.sync();
  CHECK(y.download() == FVec{0.5f, -1.25f, 2.0f, 0.5f, -1.25f, 2.0f});
}

TEST_CASE("linear forward gives the same bits when the cached plan is reused", "[gpu]") {
  Blas blas;
  Stream s;
  std::mt19937 rng(7);
  const DeviceArray x(random_values(rng, 48 * 64, DType::bf16), DType::bf16);
  const DeviceArray w(random_values(rng, 64 * 80, DType::bf16), DType::bf16);
  DeviceArray y1(FVec(48 * 80, 0.0f), DType::bf16), y2(FVec(48 * 80, 1.0f), DType::bf16);
  linear_forward(blas, s.get(), x.cptr(), w.cptr(), ConstDevPtr(), y1.ptr(), 48, 64, 80,
                 WeightLayout::out_in);
  linear_forward(blas, s.get(), x.cptr(), w.cptr(), ConstDevPtr(), y2.ptr(), 48, 64, 80,
                 WeightLayout::out_in);
  s.sync();
  CHECK(y1.download() == y2.download());
}

TEST_CASE("linear backward accumulates dx, dw, dbias as cpu for every layout and dtype", "[gpu]") {
  Blas blas;
  uint32_t seed = 200;
  for (const DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
      check_linear_backward(blas, {5, 7, 3, layout, dt, true, dt}, true, ++seed);
      // n = 70 > 32 rows: the bias gradient sums 3 row chunks through the workspace.
      check_linear_backward(blas, {70, 96, 64, layout, dt, true, DType::f32}, true, ++seed);
      check_linear_backward(blas, {64, 32, 48, layout, dt, false, dt}, false, ++seed);
      check_linear_backward(blas, {1, 1, 1, layout, dt, true, dt}, true, ++seed);
    }
  check_linear_backward(blas, {40, 24, 16, WeightLayout::in_out, DType::bf16, true, DType::bf16, 1},
                        true, 300);
}

TEST_CASE("linear backward writes fp32 gradients of bf16 inputs", "[gpu]") {
  Blas blas;
  Stream s;
  const int64_t n = 20, in = 16, out = 24;
  std::mt19937 rng(9);
  const FVec x = random_values(rng, n * in, DType::bf16),
             w = random_values(rng, in * out, DType::bf16),
             dy = random_values(rng, n * out, DType::bf16);
  const FVec dx0 = random_values(rng, n * in, DType::f32),
             dw0 = random_values(rng, in * out, DType::f32);
  FVec dx_ref = dx0, dw_ref = dw0;
  cpu::linear_backward(x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(), nullptr, n, in,
                       out, WeightLayout::out_in);
  const DeviceArray xd(x, DType::bf16), wd(w, DType::bf16), dyd(dy, DType::bf16);
  DeviceArray dxd(dx0, DType::f32), dwd(dw0, DType::f32);
  linear_backward(blas, s.get(), xd.cptr(), wd.cptr(), dyd.cptr(), dxd.ptr(), dwd.ptr(), DevPtr(),
                  n, in, out, WeightLayout::out_in, Workspace{});
  s.sync();
  check_close(dxd.download(), dx_ref, tol_for(DType::f32, 5.0), "dx f32");
  check_close(dwd.download(), dw_ref, tol_for(DType::f32, 5.0), "dw f32");
}

TEST_CASE("linear rejects mixed input dtypes before launching", "[gpu]") {
  Blas blas;
  Stream s;
  const DeviceArray x(FVec(4, 1.0f), DType::bf16), w(FVec(4, 1.0f), DType::f32);
  DeviceArray y(FVec(4, 0.0f), DType::bf16);
  CHECK_THROWS_AS(linear_forward(blas, s.get(), x.cptr(), w.cptr(), ConstDevPtr(), y.ptr(), 2, 2, 2,
                                 WeightLayout::out_in),
                  std::invalid_argument);
}

}  // namespace shardscope::engine::cuda::test
