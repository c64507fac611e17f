// Elementwise ops (gelu both forms, relu, swiglu, residual plain and
// broadcast) against cpu on the same inputs: f32 / bf16 / f16, sizes that take
// the packed path (multiples of 8) and the scalar path (odd, n = 1), mixed
// operand dtypes, gradients pre-filled so that accumulation is checked.
#include <cmath>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/ops.h"
#include "tests/engine/cuda/cuda_ops_test_util.h"

namespace shardscope::engine::cuda::test {
namespace {

const int64_t kSizes[] = {1, 1000, 1001};  // scalar, packed, odd

// Inputs in [-3, 3): both sides of every activation's bend.
FVec inputs(std::mt19937& rng, int64_t n, DType dt) {
  return random_values(rng, n, dt, -3.0f, 3.0f);
}

void check_gelu(int64_t n, DType in_dt, DType out_dt, bool tanh_form, uint32_t seed) {
  INFO("gelu n " << n << " in " << dtype_label(in_dt) << " out " << dtype_label(out_dt) << " tanh "
                 << tanh_form);
  std::mt19937 rng(seed);
  const FVec x = inputs(rng, n, in_dt), dy = random_values(rng, n, in_dt);
  const FVec dx0 = random_values(rng, n, out_dt);
  FVec y_ref(static_cast<size_t>(n)), dx_ref = dx0;
  cpu::gelu_forward(x.data(), y_ref.data(), n, tanh_form);
  cpu::gelu_backward(x.data(), dy.data(), dx_ref.data(), n, tanh_form);
  Stream s;
  const DeviceArray xd(x, in_dt), dyd(dy, in_dt);
  DeviceArray yd(random_values(rng, n, out_dt), out_dt), dxd(dx0, out_dt);
  gelu_forward(s.get(), xd.cptr(), yd.ptr(), n, tanh_form);
  gelu_backward(s.get(), xd.cptr(), dyd.cptr(), dxd.ptr(), n, tanh_form);
  s.sync();
  check_close(yd.download(), y_ref, tol_for(out_dt, 3.0), "y");
  check_close(dxd.download(), dx_ref, tol_for(out_dt, 2.0), "dx");
}

}  // namespace

TEST_CASE("gelu forward and backward match cpu, tanh and erf forms", "[gpu]") {
  uint32_t seed = 1;
  for (const bool tanh_form : {true, false})
    for (const DType dt : {DType::f32, DType::bf16, DType::f16})
      for (const int64_t n : kSizes) check_gelu(n, dt, dt, tanh_form, ++seed);
  check_gelu(1000, DType::bf16, DType::f32, true, 99);  // mixed dtypes: scalar path
}

TEST_CASE("relu forward and backward match cpu (gradient where the output is positive)", "[gpu]") {
  uint32_t seed = 20;
  for (const DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const int64_t n : kSizes) {
      INFO("relu n " << n << " " << dtype_label(dt));
      std::mt19937 rng(++seed);
      const FVec x = inputs(rng, n, dt), dy = random_values(rng, n, dt),
                 dx0 = random_values(rng, n, dt);
      FVec y_ref(static_cast<size_t>(n)), dx_ref = dx0;
      cpu::relu_forward(x.data(), y_ref.data(), n);
      cpu::relu_backward(y_ref.data(), dy.data(), dx_ref.data(), n);
      Stream s;
      const DeviceArray xd(x, dt), dyd(dy, dt);
      DeviceArray yd(random_values(rng, n, dt), dt), dxd(dx0, dt);
      relu_forward(s.get(), xd.cptr(), yd.ptr(), n);
      relu_backward(s.get(), yd.cptr(), dyd.cptr(), dxd.ptr(), n);
      s.sync();
      CHECK(yd.download() == y_ref);  // exact: a copy or zero
      check_close(dxd.download(), dx_ref, tol_for(dt, 1.0), "dx");
    }
}

TEST_CASE("swiglu forward and backward match cpu", "[gpu]") {
  uint32_t seed = 40;
  for (const DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const int64_t n : kSizes) {
      INFO("swiglu n " << n << " " << dtype_label(dt));
      std::mt19937 rng(++seed);
      const FVec gate = inputs(rng, n, dt), up = random_values(rng, n, dt),
                 dy = random_values(rng, n, dt);
      const FVec dgate0 = random_values(rng, n, dt), dup0 = random_values(rng, n, dt);
      FVec y_ref(static_cast<size_t>(n)), dgate_ref = dgate0, dup_ref = dup0;
      cpu::swiglu_forward(gate.data(), up.data(), y_ref.data(), n);
      cpu::swiglu_backward(gate.data(), up.data(), dy.data(), dgate_ref.data(), dup_ref.data(), n);
      Stream s;
      const DeviceArray gd(gate, dt), ud(up, dt), dyd(dy, dt);
      DeviceArray yd(random_values(rng, n, dt), dt), dgd(dgate0, dt), dud(dup0, dt);
      swiglu_forward(s.get(), gd.cptr(), ud.cptr(), yd.ptr(), n);
      swiglu_backward(s.get(), gd.cptr(), ud.cptr(), dyd.cptr(), dgd.ptr(), dud.ptr(), n);
      s.sync();
      check_close(yd.download(), y_ref, tol_for(dt, 3.0), "y");
      check_close(dgd.download(), dgate_ref, tol_for(dt, 3.0), "dgate");
      check_close(dud.download(), dup_ref, tol_for(dt, 3.0), "dup");
    }
}

TEST_CASE("residual add matches cpu, plain and broadcast over leading dims", "[gpu]") {
  struct Case {
    int64_t n, b_n;
  };
  uint32_t seed = 60;
  // b_n == n (plain), broadcast with 4 rows (no workspace) and 70 rows (3
  // chunks through the workspace), odd row lengths for the scalar path.
  for (const Case c : {Case{1000, 1000}, Case{1001, 1001}, Case{4 * 768, 768}, Case{70 * 24, 24},
                       Case{5 * 7, 7}, Case{1, 1}})
    for (const DType dt : {DType::f32, DType::bf16}) {
      INFO("residual n " << c.n << " b_n " << c.b_n << " " << dtype_label(dt));
      std::mt19937 rng(++seed);
      const FVec a = random_values(rng, c.n, dt), b = random_values(rng, c.b_n, dt),
                 dy = random_values(rng, c.n, dt);
      const FVec da0 = random_values(rng, c.n, dt), db0 = random_values(rng, c.b_n, dt);
      FVec y_ref(static_cast<size_t>(c.n)), da_ref = da0, db_ref = db0;
      cpu::residual_forward(a.data(), b.data(), y_ref.data(), c.n, c.b_n);
      cpu::residual_backward(dy.data(), da_ref.data(), db_ref.data(), c.n, c.b_n);
      Stream s;
      const DeviceArray ad(a, dt), bd(b, dt), dyd(dy, dt);
      DeviceArray yd(random_values(rng, c.n, dt), dt), dad(da0, dt), dbd(db0, dt);
      const size_t ws_bytes = residual_backward_workspace_bytes(c.n, c.b_n);
      DeviceBuffer ws(ws_bytes);
      residual_forward(s.get(), ad.cptr(), bd.cptr(), yd.ptr(), c.n, c.b_n);
      residual_backward(s.get(), dyd.cptr(), dad.ptr(), dbd.ptr(), c.n, c.b_n,
                        Workspace{ws.get(), ws_bytes});
      s.sync();
      check_close(yd.download(), y_ref, tol_for(dt, 2.0), "y");
      check_close(dad.download(), da_ref, tol_for(dt, 2.0), "da");
      check_close(dbd.download(), db_ref,
                  tol_for(dt, 2.0 * std::sqrt(static_cast<double>(c.n / c.b_n))), "db");
    }
}

TEST_CASE("residual backward leaves a null gradient out and fills the other", "[gpu]") {
  const int64_t n = 64, b_n = 16;
  std::mt19937 rng(77);
  const FVec dy = random_values(rng, n, DType::f32), db0 = random_values(rng, b_n, DType::f32);
  FVec db_ref = db0;
  cpu::residual_backward(dy.data(), nullptr, db_ref.data(), n, b_n);
  Stream s;
  const DeviceArray dyd(dy, DType::f32);
  DeviceArray dbd(db0, DType::f32);
  residual_backward(s.get(), dyd.cptr(), DevPtr(), dbd.ptr(), n, b_n, Workspace{});
  s.sync();
  check_close(dbd.download(), db_ref, tol_for(DType::f32, 2.0), "db (da null)");
}

}  // namespace shardscope::engine::cuda::test
