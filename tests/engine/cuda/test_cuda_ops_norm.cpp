// layernorm / rmsnorm forward and backward against cpu on the same inputs:
// f32 / bf16 / f16, packed rows (c a multiple of 8) and odd rows, one row,
// mixed operand dtypes (scalar path), and enough rows (n = 70) for the dw/db
// column sums to go through the workspace. Backward reads the CPU forward's
// mean/rstd so that it is checked on its own; gradients start non-zero.
#include <cmath>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/ops.h"
#include "tests/engine/cuda/cuda_ops_test_util.h"

namespace shardscope::engine::cuda::test {
namespace {

struct NormCase {
  int64_t n, c;
  DType dt;        // x, y, dy, dx
  DType param_dt;  // w, b, dw, db
  bool rms;
};

void check_norm(const NormCase& k, uint32_t seed) {
  INFO((k.rms ? "rmsnorm" : "layernorm") << " n " << k.n << " c " << k.c << " " << dtype_label(k.dt)
                                         << " params " << dtype_label(k.param_dt));
  const double eps = 1e-5;
  std::mt19937 rng(seed);
  // Rows with a non-zero mean: the two-pass variance must not cancel.
  const FVec x = random_values(rng, k.n * k.c, k.dt, -0.5f, 1.5f);
  const FVec w = random_values(rng, k.c, k.param_dt), b = random_values(rng, k.c, k.param_dt);
  FVec y_ref(x.size()), mean_ref(static_cast<size_t>(k.n)), rstd_ref(static_cast<size_t>(k.n));
  if (k.rms)
    cpu::rmsnorm_forward(x.data(), w.data(), y_ref.data(), rstd_ref.data(), k.n, k.c, eps);
  else
    cpu::layernorm_forward(x.data(), w.data(), b.data(), y_ref.data(), mean_ref.data(),
                           rstd_ref.data(), k.n, k.c, eps);

  Stream s;
  const DeviceArray xd(x, k.dt), wd(w, k.param_dt), bd(b, k.param_dt);
  DeviceArray yd(random_values(rng, k.n * k.c, k.dt), k.dt);
  DeviceArray mean_d(FVec(static_cast<size_t>(k.n), 9.0f), DType::f32),
      rstd_d(FVec(static_cast<size_t>(k.n), 9.0f), DType::f32);
  auto* mean_p = static_cast<float*>(mean_d.ptr().ptr);
  auto* rstd_p = static_cast<float*>(rstd_d.ptr().ptr);
  if (k.rms)
    rmsnorm_forward(s.get(), xd.cptr(), wd.cptr(), yd.ptr(), rstd_p, k.n, k.c, eps);
  else
    layernorm_forward(s.get(), xd.cptr(), wd.cptr(), bd.cptr(), yd.ptr(), mean_p, rstd_p, k.n, k.c,
                      eps);
  s.sync();
  check_close(yd.download(), y_ref, tol_for(k.dt, 4.0), "y");
  check_close(rstd_d.download(), rstd_ref, tol_for(DType::f32, 1.0), "rstd");
  if (!k.rms) check_close(mean_d.download(), mean_ref, tol_for(DType::f32, 1.0), "mean");

  // Backward from the CPU's statistics, into non-zero gradients.
  const FVec dy = random_values(rng, k.n * k.c, k.dt);
  const FVec dx0 = random_values(rng, k.n * k.c, k.dt);
  const FVec dw0 = random_values(rng, k.c, k.param_dt), db0 = random_values(rng, k.c, k.param_dt);
  FVec dx_ref = dx0, dw_ref = dw0, db_ref = db0;
  if (k.rms)
    cpu::rmsnorm_backward(x.data(), w.data(), rstd_ref.data(), dy.data(), dx_ref.data(),
                          dw_ref.data(), k.n, k.c);
  else
    cpu::layernorm_backward(x.data(), w.data(), mean_ref.data(), rstd_ref.data(), dy.data(),
                            dx_ref.data(), dw_ref.data(), db_ref.data(), k.n, k.c);
  const DeviceArray dyd(dy, k.dt), mean_in(mean_ref, DType::f32), rstd_in(rstd_ref, DType::f32);
  DeviceArray dxd(dx0, k.dt), dwd(dw0, k.param_dt), dbd(db0, k.param_dt);
  const size_t ws_bytes = k.rms ? rmsnorm_backward_workspace_bytes(k.n, k.c)
                                : layernorm_backward_workspace_bytes(k.n, k.c);
  DeviceBuffer ws(ws_bytes);
  const auto* mean_c = static_cast<const float*>(mean_in.cptr().ptr);
  const auto* rstd_c = static_cast<const float*>(rstd_in.cptr().ptr);
  if (k.rms)
    rmsnorm_backward(s.get(), xd.cptr(), wd.cptr(), rstd_c, dyd.cptr(), dxd.ptr(), dwd.ptr(), k.n,
                     k.c, Workspace{ws.get(), ws_bytes});
  else
    layernorm_backward(s.get(), xd.cptr(), wd.cptr(), mean_c, rstd_c, dyd.cptr(), dxd.ptr(),
                       dwd.ptr(), dbd.ptr(), k.n, k.c, Workspace{ws.get(), ws_bytes});
  s.sync();
  // dx: rstd (up to ~4 for these rows) times terms of size ~1.
  check_close(dxd.download(), dx_ref, tol_for(k.dt, 8.0), "dx");
  const double rows_scale = 4.0 * std::sqrt(static_cast<double>(k.n) + 1.0);
  check_close(dwd.download(), dw_ref, tol_for(k.param_dt, rows_scale), "dw");
  check_close(dbd.download(), db_ref, tol_for(k.param_dt, rows_scale), "db");
}

}  // namespace

TEST_CASE("layernorm forward and backward match cpu for every dtype and row shape", "[gpu]") {
  uint32_t seed = 10;
  for (const DType dt : {DType::f32, DType::bf16, DType::f16}) {
    check_norm({6, 64, dt, dt, false}, ++seed);   // packed rows
    check_norm({5, 33, dt, dt, false}, ++seed);   // odd row length: scalar path
    check_norm({1, 7, dt, dt, false}, ++seed);    // one short row
    check_norm({70, 96, dt, dt, false}, ++seed);  // dw/db through the workspace (3 chunks)
  }
  check_norm({9, 768, DType::bf16, DType::bf16, false}, 30);  // GPT-2 width
  check_norm({12, 64, DType::bf16, DType::f32, false}, 31);   // fp32 params, bf16 activations
}

TEST_CASE("rmsnorm forward and backward match cpu for every dtype and row shape", "[gpu]") {
  uint32_t seed = 40;
  for (const DType dt : {DType::f32, DType::bf16, DType::f16}) {
    check_norm({6, 64, dt, dt, true}, ++seed);
    check_norm({5, 33, dt, dt, true}, ++seed);
    check_norm({1, 1, dt, dt, true}, ++seed);
    check_norm({70, 96, dt, dt, true}, ++seed);
  }
  check_norm({12, 64, DType::f16, DType::f32, true}, 60);
}

TEST_CASE("layernorm backward weight gradients are the same bits on every run", "[gpu]") {
  const int64_t n = 300, c = 40;
  std::mt19937 rng(5);
  const FVec x = random_values(rng, n * c, DType::f32), w = random_values(rng, c, DType::f32),
             dy = random_values(rng, n * c, DType::f32);
  FVec mean(n), rstd(n), y(n * c);
  const FVec b = random_values(rng, c, DType::f32);
  cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), n, c,
                         1e-5);
  Stream s;
  const DeviceArray xd(x, DType::f32), wd(w, DType::f32), dyd(dy, DType::f32),
      meand(mean, DType::f32), rstdd(rstd, DType::f32);
  const size_t ws_bytes = layernorm_backward_workspace_bytes(n, c);
  REQUIRE(ws_bytes > 0);  // 300 rows: chunked
  DeviceBuffer ws(ws_bytes);
  FVec first_dw;
  for (int run = 0; run < 2; ++run) {
    DeviceArray dx(FVec(n * c, 0.0f), DType::f32), dw(FVec(c, 0.0f), DType::f32),
        db(FVec(c, 0.0f), DType::f32);
    layernorm_backward(s.get(), xd.cptr(), wd.cptr(), static_cast<const float*>(meand.cptr().ptr),
                       static_cast<const float*>(rstdd.cptr().ptr), dyd.cptr(), dx.ptr(), dw.ptr(),
                       db.ptr(), n, c, Workspace{ws.get(), ws_bytes});
    s.sync();
    if (run == 0)
      first_dw = dw.download();
    else
      CHECK(dw.download() == first_dw);
  }
}

}  // namespace shardscope::engine::cuda::test
