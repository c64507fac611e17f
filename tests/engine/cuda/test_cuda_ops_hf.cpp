// The ops the Gemma, Gemma 2, Phi-3, Qwen3 and OPT graphs add, against their
// CPU twins on the same inputs: per-head RMSNorm with a (1 + w) weight, the
// gated MLP (SiLU, GELU, GELU-tanh; packed gate|up and separate tensors),
// scale, softcap, and the embedding's position offset and padding_idx.
// f32 / bf16 / f16, shapes that take the packed path and the scalar path;
// gradients pre-filled so that accumulation is checked.
#include <cmath>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/ops.h"
#include "tests/engine/cuda/cuda_ops_test_util.h"

namespace shardscope::engine::cuda::test {
namespace {

using cpu::GateActivation;

const char* act_label(GateActivation act) {
  return act == GateActivation::silu ? "silu" : act == GateActivation::gelu ? "gelu" : "gelu_tanh";
}

// n rows of c (one head each), weight (offset + w).
void check_rmsnorm(int64_t n, int64_t c, double offset, DType dt, uint32_t seed) {
  INFO("rmsnorm n " << n << " c " << c << " offset " << offset << " " << dtype_label(dt));
  const double eps = 1e-6;
  std::mt19937 rng(seed);
  const FVec x = random_values(rng, n * c, dt, -2.0f, 2.0f);
  // Gemma's weights start at 0 and stay small: (1 + w) near 1.
  const FVec w = random_values(rng, c, dt, -0.5f, 0.5f);
  FVec y_ref(x.size()), rstd_ref(static_cast<size_t>(n));
  cpu::rmsnorm_forward(x.data(), w.data(), y_ref.data(), rstd_ref.data(), n, c, eps, offset);
  Stream s;
  const DeviceArray xd(x, dt), wd(w, dt);
  DeviceArray yd(random_values(rng, n * c, dt), dt);
  DeviceArray rstd_d(FVec(static_cast<size_t>(n), 9.0f), DType::f32);
  rmsnorm_forward(s.get(), xd.cptr(), wd.cptr(), yd.ptr(), static_cast<float*>(rstd_d.ptr().ptr), n,
                  c, eps, offset);
  s.sync();
  check_close(yd.download(), y_ref, tol_for(dt, 8.0), "y");
  check_close(rstd_d.download(), rstd_ref, tol_for(DType::f32, 1.0), "rstd");

  const FVec dy = random_values(rng, n * c, dt), dx0 = random_values(rng, n * c, dt),
             dw0 = random_values(rng, c, dt);
  FVec dx_ref = dx0, dw_ref = dw0;
  cpu::rmsnorm_backward(x.data(), w.data(), rstd_ref.data(), dy.data(), dx_ref.data(),
                        dw_ref.data(), n, c, offset);
  const DeviceArray dyd(dy, dt), rstd_in(rstd_ref, DType::f32);
  DeviceArray dxd(dx0, dt), dwd(dw0, dt);
  const size_t ws_bytes = rmsnorm_backward_workspace_bytes(n, c);
  DeviceBuffer ws(ws_bytes);
  rmsnorm_backward(s.get(), xd.cptr(), wd.cptr(), static_cast<const float*>(rstd_in.cptr().ptr),
                   dyd.cptr(), dxd.ptr(), dwd.ptr(), n, c, Workspace{ws.get(), ws_bytes}, offset);
  s.sync();
  check_close(dxd.download(), dx_ref, tol_for(dt, 16.0), "dx");
  check_close(dwd.download(), dw_ref, tol_for(dt, 8.0 * std::sqrt(double(n) + 1.0)), "dw");
}

// rows x width; packed: one [rows, 2 * width] buffer (gate | up), else two
// dense [rows, width] tensors (stride rows * width, one row).
void check_gated(int64_t rows, int64_t width, bool packed, GateActivation act, DType dt,
                 uint32_t seed) {
  INFO("gated rows " << rows << " width " << width << " packed " << packed << " " << act_label(act)
                     << " " << dtype_label(dt));
  std::mt19937 rng(seed);
  const int64_t n = rows * width;
  const int64_t stride = packed ? 2 * width : n, r = packed ? rows : 1, w = packed ? width : n;
  const FVec a = random_values(rng, packed ? 2 * n : n, dt, -3.0f, 3.0f);
  const FVec b = packed ? FVec{} : random_values(rng, n, dt);
  const float* gate = a.data();
  const float* up = packed ? a.data() + width : b.data();
  FVec y_ref(static_cast<size_t>(n));
  cpu::gated_forward(gate, up, y_ref.data(), r, w, stride, act);
  const FVec dy = random_values(rng, n, dt);
  const FVec da0 = random_values(rng, packed ? 2 * n : n, dt);
  const FVec db0 = packed ? FVec{} : random_values(rng, n, dt);
  FVec da_ref = da0, db_ref = db0;
  cpu::gated_backward(gate, up, dy.data(), da_ref.data(),
                      packed ? da_ref.data() + width : db_ref.data(), r, w, stride, act);

  Stream s;
  const DeviceArray ad(a, dt), bd(packed ? FVec{} : b, dt), dyd(dy, dt);
  DeviceArray yd(random_values(rng, n, dt), dt), dad(da0, dt), dbd(db0, dt);
  const ConstDevPtr gd = ad.cptr(), ud = packed ? ad.cptr().at(width) : bd.cptr();
  gated_forward(s.get(), gd, ud, yd.ptr(), r, w, stride, act);
  gated_backward(s.get(), gd, ud, dyd.cptr(), dad.ptr(), packed ? dad.ptr().at(width) : dbd.ptr(),
                 r, w, stride, act);
  s.sync();
  // Values up to ~3 (act(3) * 1); gradients sums of two terms of that size.
  check_close(yd.download(), y_ref, tol_for(dt, 3.0), "y");
  check_close(dad.download(), da_ref, tol_for(dt, 4.0), packed ? "dgate|dup" : "dgate");
  if (!packed) check_close(dbd.download(), db_ref, tol_for(dt, 4.0), "dup");
}

}  // namespace

TEST_CASE("per-head rmsnorm with a (1 + w) weight matches cpu", "[gpu]") {
  uint32_t seed = 300;
  for (const DType dt : {DType::f32, DType::bf16, DType::f16}) {
    // Qwen3's q_norm: B*T*H = 2*5*4 rows of head_dim 32, packed path.
    check_rmsnorm(40, 32, 0.0, dt, ++seed);
    check_rmsnorm(40, 32, 1.0, dt, ++seed);  // Gemma: (1 + w)
    check_rmsnorm(70, 33, 1.0, dt, ++seed);  // odd rows (scalar path), dw through the workspace
  }
}

TEST_CASE("gated MLP forward and backward match cpu: every activation, packed and separate",
          "[gpu]") {
  uint32_t seed = 400;
  for (const GateActivation act :
       {GateActivation::silu, GateActivation::gelu, GateActivation::gelu_tanh})
    for (const DType dt : {DType::f32, DType::bf16, DType::f16})
      for (const bool packed : {true, false}) {
        check_gated(6, 64, packed, act, dt, ++seed);  // packed path (rows of whole packs)
        check_gated(5, 33, packed, act, dt, ++seed);  // scalar path
        check_gated(1, 1, packed, act, dt, ++seed);
      }
}

TEST_CASE("scale forward and backward match cpu, with the constant as the caller rounds it",
          "[gpu]") {
  uint32_t seed = 500;
  for (const DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1001}}) {
      INFO("scale n " << n << " " << dtype_label(dt));
      std::mt19937 rng(++seed);
      const float c = round_to(dt, std::sqrt(3072.0f));  // Gemma's sqrt(hidden_size)
      const FVec x = random_values(rng, n, dt), dy = random_values(rng, n, dt),
                 dx0 = random_values(rng, n, dt);
      FVec y_ref(static_cast<size_t>(n)), dx_ref = dx0;
      cpu::scale_forward(x.data(), y_ref.data(), n, c);
      cpu::scale_backward(dy.data(), dx_ref.data(), n, c);
      Stream s;
      const DeviceArray xd(x, dt), dyd(dy, dt);
      DeviceArray yd(random_values(rng, n, dt), dt), dxd(dx0, dt);
      scale_forward(s.get(), xd.cptr(), yd.ptr(), n, c);
      scale_backward(s.get(), dyd.cptr(), dxd.ptr(), n, c);
      s.sync();
      // One fp32 product, rounded once: the CPU's value rounded to dt.
      CHECK(yd.download() == rounded(y_ref, dt));
      check_close(dxd.download(), dx_ref, tol_for(dt, 60.0), "dx");
    }
}

TEST_CASE("softcap forward and backward match cpu (Gemma 2's final logit soft-capping)", "[gpu]") {
  uint32_t seed = 600;
  const float cap = 30.0f;
  for (const DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1001}}) {
      INFO("softcap n " << n << " " << dtype_label(dt));
      std::mt19937 rng(++seed);
      // Logits on both sides of the cap, where tanh saturates.
      const FVec x = random_values(rng, n, dt, -90.0f, 90.0f);
      FVec y_ref(static_cast<size_t>(n)), th_ref(static_cast<size_t>(n));
      cpu::softcap_forward(x.data(), y_ref.data(), th_ref.data(), n, cap);
      Stream s;
      const DeviceArray xd(x, dt);
      DeviceArray yd(random_values(rng, n, dt), dt), thd(random_values(rng, n, dt), dt);
      softcap_forward(s.get(), xd.cptr(), yd.ptr(), thd.ptr(), n, cap);
      s.sync();
      check_close(yd.download(), y_ref, tol_for(dt, 2.0 * cap), "y");
      check_close(thd.download(), th_ref, tol_for(dt, 2.0), "th");
      // Backward from the CPU's th as stored in dt.
      const FVec th = rounded(th_ref, dt), dy = random_values(rng, n, dt),
                 dx0 = random_values(rng, n, dt);
      FVec dx_ref = dx0;
      cpu::softcap_backward(th.data(), dy.data(), dx_ref.data(), n);
      const DeviceArray th_in(th, dt), dyd(dy, dt);
      DeviceArray dxd(dx0, dt);
      softcap_backward(s.get(), th_in.cptr(), dyd.cptr(), dxd.ptr(), n);
      s.sync();
      check_close(dxd.download(), dx_ref, tol_for(dt, 2.0), "dx");
    }
}

TEST_CASE("embedding from a position offset and with padding_idx matches cpu", "[gpu]") {
  const int64_t rows = 20, dim = 16, offset = 2;
  uint32_t seed = 700;
  for (const DType dt : {DType::f32, DType::bf16}) {
    INFO("embedding " << dtype_label(dt));
    std::mt19937 rng(++seed);
    const FVec table = random_values(rng, rows * dim, dt);
    Stream s;
    const DeviceArray td(table, dt);
    // OPT's learned positions: n positions read from row `offset` on.
    const int64_t n = 10;
    FVec y_ref(static_cast<size_t>(n * dim));
    cpu::embedding_forward(nullptr, table.data() + offset * dim, y_ref.data(), n, rows - offset,
                           dim);
    DeviceArray yd(random_values(rng, n * dim, dt), dt);
    embedding_forward(s.get(), nullptr, td.cptr().at(offset * dim), yd.ptr(), n, rows - offset, dim,
                      nullptr);
    s.sync();
    CHECK(yd.download() == y_ref);  // a copy
    const FVec dy = random_values(rng, n * dim, dt), dt0 = random_values(rng, rows * dim, dt);
    FVec dt_ref = dt0;
    cpu::embedding_backward(nullptr, dy.data(), dt_ref.data() + offset * dim, n, rows - offset,
                            dim);
    const DeviceArray dyd(dy, dt);
    DeviceArray dtd(dt0, dt);
    embedding_backward(s.get(), nullptr, dyd.cptr(), dtd.ptr().at(offset * dim), n, rows - offset,
                       dim, Workspace{});
    s.sync();
    check_close(dtd.download(), dt_ref, tol_for(dt, 2.0), "dtable (positions)");

    // Token ids with the padding id (1) three times: its row gets nothing.
    const int64_t padding_idx = 1;
    const std::vector<int64_t> ids = {1, 4, 7, 1, 4, 19, 0, 1};
    const auto m = static_cast<int64_t>(ids.size());
    const FVec dyt = random_values(rng, m * dim, dt);
    FVec dtab_ref = dt0;
    cpu::embedding_backward(ids.data(), dyt.data(), dtab_ref.data(), m, rows, dim, padding_idx);
    const DeviceVector<int64_t> idd(ids);
    const DeviceArray dytd(dyt, dt);
    DeviceArray dtab(dt0, dt);
    const size_t ws_bytes = embedding_backward_workspace_bytes(m, rows, dim);
    DeviceBuffer ws(ws_bytes);
    embedding_backward(s.get(), idd.get(), dytd.cptr(), dtab.ptr(), m, rows, dim,
                       Workspace{ws.get(), ws_bytes}, padding_idx);
    s.sync();
    const FVec got = dtab.download();
    check_close(got, dtab_ref, tol_for(dt, 4.0), "dtable (ids)");
    for (int64_t c = 0; c < dim; ++c) {  // the padding row: exactly as it was
      INFO("padding row, column " << c);
      CHECK(got[static_cast<size_t>(padding_idx * dim + c)] ==
            dt0[static_cast<size_t>(padding_idx * dim + c)]);
    }
  }
}

}  // namespace shardscope::engine::cuda::test
