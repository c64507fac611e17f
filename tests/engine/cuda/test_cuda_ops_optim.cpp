// Optimizer step and numerics (AdamW, SGD, squared norm, inf check, clip
// factor) and casts / accumulation / scaling against cpu. The update kernels
// evaluate the CPU's formulas with explicitly rounded fp32 operations; the
// bound below (1e-6 relative) leaves room only for the last bit.
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/cpu/optim.h"
#include "engine/cuda/ops/ops.h"
#include "tests/engine/cuda/cuda_ops_test_util.h"

namespace shardscope::engine::cuda::test {
namespace {

constexpr Tolerance kUpdateTol{1e-7, 1e-6};

FVec times(FVec v, float factor) {
  for (float& x : v) x *= factor;
  return v;
}

struct StepCase {
  int64_t n;
  DType g_dt;
  int64_t step;
  bool with_factor;  // g_factor = 0.5 (device)
};

void check_adamw(const StepCase& c, uint32_t seed) {
  INFO("adamw n " << c.n << " g " << dtype_label(c.g_dt) << " step " << c.step << " factor "
                  << c.with_factor);
  cpu::AdamWParams h;
  h.lr = 3e-3, h.beta1 = 0.9, h.beta2 = 0.95, h.eps = 1e-8, h.weight_decay = 0.1;
  std::mt19937 rng(seed);
  const FVec p0 = random_values(rng, c.n, DType::f32), g = random_values(rng, c.n, c.g_dt);
  const FVec m0 = random_values(rng, c.n, DType::f32, -0.1f, 0.1f);
  const FVec v0 = random_values(rng, c.n, DType::f32, 0.001f, 0.01f);
  const float factor = 0.5f;
  FVec p = p0, m = m0, v = v0;
  const FVec g_used = c.with_factor ? times(g, factor) : g;
  cpu::adamw_step(p.data(), g_used.data(), m.data(), v.data(), c.n, h, c.step);

  Stream s;
  DeviceArray pd(p0, DType::f32), md(m0, DType::f32), vd(v0, DType::f32);
  const DeviceArray gd(g, c.g_dt);
  const DeviceVector<float> factor_d(std::vector<float>{factor});
  adamw_step(s.get(), static_cast<float*>(pd.ptr().ptr), gd.cptr(),
             static_cast<float*>(md.ptr().ptr), static_cast<float*>(vd.ptr().ptr), c.n, h, c.step,
             c.with_factor ? factor_d.get() : nullptr, nullptr);
  s.sync();
  check_close(pd.download(), p, kUpdateTol, "p");
  check_close(md.download(), m, kUpdateTol, "m");
  check_close(vd.download(), v, kUpdateTol, "v");
}

void check_sgd(const StepCase& c, double momentum, double weight_decay, uint32_t seed) {
  INFO("sgd n " << c.n << " g " << dtype_label(c.g_dt) << " step " << c.step << " momentum "
                << momentum << " wd " << weight_decay);
  cpu::SgdParams h;
  h.lr = 0.05, h.momentum = momentum, h.weight_decay = weight_decay;
  std::mt19937 rng(seed);
  const FVec p0 = random_values(rng, c.n, DType::f32), g = random_values(rng, c.n, c.g_dt);
  const FVec buf0 = random_values(rng, c.n, DType::f32);
  FVec p = p0, buf = buf0;
  const float factor = 0.25f;
  const FVec g_used = c.with_factor ? times(g, factor) : g;
  cpu::sgd_step(p.data(), g_used.data(), buf.data(), c.n, h, c.step);

  Stream s;
  DeviceArray pd(p0, DType::f32), bufd(buf0, DType::f32);
  const DeviceArray gd(g, c.g_dt);
  const DeviceVector<float> factor_d(std::vector<float>{factor});
  sgd_step(s.get(), static_cast<float*>(pd.ptr().ptr), gd.cptr(),
           static_cast<float*>(bufd.ptr().ptr), c.n, h, c.step,
           c.with_factor ? factor_d.get() : nullptr, nullptr);
  s.sync();
  check_close(pd.download(), p, kUpdateTol, "p");
  check_close(bufd.download(), momentum != 0.0 ? buf : buf0, kUpdateTol, "buf");
}

}  // namespace

TEST_CASE("adamw step matches cpu for fp32 and 16-bit gradients, with and without g_factor",
          "[gpu]") {
  uint32_t seed = 1;
  for (const DType g_dt : {DType::f32, DType::bf16, DType::f16})
    for (const int64_t n : {int64_t{1}, int64_t{1003}, int64_t{4096}})  // scalar, odd, vectorised
      for (const bool with_factor : {false, true}) {
        check_adamw({n, g_dt, 1, with_factor}, ++seed);
        check_adamw({n, g_dt, 7, with_factor}, ++seed);
      }
}

TEST_CASE("adamw and sgd leave every state untouched when skip is set", "[gpu]") {
  const int64_t n = 256;
  std::mt19937 rng(5);
  const FVec p0 = random_values(rng, n, DType::f32), g = random_values(rng, n, DType::f32);
  Stream s;
  DeviceArray pd(p0, DType::f32), md(p0, DType::f32), vd(times(p0, -1.0f), DType::f32);
  const DeviceArray gd(g, DType::f32);
  const DeviceVector<float> skip(std::vector<float>{1.0f});
  auto* p = static_cast<float*>(pd.ptr().ptr);
  adamw_step(s.get(), p, gd.cptr(), static_cast<float*>(md.ptr().ptr),
             static_cast<float*>(vd.ptr().ptr), n, cpu::AdamWParams{}, 3, nullptr, skip.get());
  cpu::SgdParams sgd;
  sgd.momentum = 0.9;
  sgd_step(s.get(), p, gd.cptr(), static_cast<float*>(md.ptr().ptr), n, sgd, 2, nullptr,
           skip.get());
  s.sync();
  CHECK(pd.download() == p0);
  CHECK(md.download() == p0);
  CHECK(vd.download() == times(p0, -1.0f));
}

TEST_CASE("sgd step matches cpu with and without momentum and weight decay", "[gpu]") {
  uint32_t seed = 100;
  for (const DType g_dt : {DType::f32, DType::bf16})
    for (const int64_t n : {int64_t{1}, int64_t{1003}}) {
      check_sgd({n, g_dt, 1, false}, 0.0, 0.0, ++seed);
      check_sgd({n, g_dt, 1, true}, 0.9, 0.01, ++seed);  // step 1: buf = g'
      check_sgd({n, g_dt, 4, false}, 0.9, 0.01, ++seed);
      check_sgd({n, g_dt, 4, true}, 0.0, 0.1, ++seed);
    }
}

TEST_CASE("squared norm accumulates sum of squares deterministically", "[gpu]") {
  uint32_t seed = 200;
  for (const DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const int64_t n : {int64_t{1}, int64_t{1001}, int64_t{1 << 20}}) {
      INFO("squared norm n " << n << " " << dtype_label(dt));
      std::mt19937 rng(++seed);
      const FVec x = random_values(rng, n, dt);
      const double ref = cpu::squared_norm(x.data(), n);
      Stream s;
      const DeviceArray xd(x, dt);
      const size_t ws_bytes = squared_norm_workspace_bytes(n);
      DeviceBuffer ws(ws_bytes);
      DeviceVector<double> acc(std::vector<double>{0.0, 0.0});
      // Twice into acc[0] (accumulates), once into acc[1]: the same bits each time.
      squared_norm_accumulate(s.get(), xd.cptr(), n, acc.get(), Workspace{ws.get(), ws_bytes});
      squared_norm_accumulate(s.get(), xd.cptr(), n, acc.get(), Workspace{ws.get(), ws_bytes});
      squared_norm_accumulate(s.get(), xd.cptr(), n, acc.get() + 1, Workspace{ws.get(), ws_bytes});
      s.sync();
      const std::vector<double> got = acc.download();
      // Sums in double of exact squares: only the order of n additions differs.
      CHECK(std::fabs(got[1] - ref) <= 1e-10 * ref);
      CHECK(got[0] == 2.0 * got[1]);  // 0 + t + t with t the same bits twice
    }
}

TEST_CASE("inf_check sets the flag for inf or NaN only", "[gpu]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const int64_t n : {int64_t{1}, int64_t{1024}, int64_t{1027}}) {
      INFO("inf_check n " << n << " " << dtype_label(dt));
      std::mt19937 rng(static_cast<uint32_t>(n));
      const FVec clean = random_values(rng, n, dt, -100.0f, 100.0f);
      for (const float special : {0.0f, inf, -inf, nan}) {
        FVec x = clean;
        if (special != 0.0f) x[static_cast<size_t>(n - 1)] = special;  // NaN != 0 too
        Stream s;
        const DeviceArray xd(x, dt);
        DeviceVector<float> flag(std::vector<float>{0.0f});
        inf_check(s.get(), xd.cptr(), n, flag.get());
        s.sync();
        const bool expect = std::isinf(special) || std::isnan(special);
        CHECK(flag.download()[0] == (expect ? 1.0f : 0.0f));
      }
    }
}

TEST_CASE("clip_factor is min(1, max_norm / (norm + 1e-6))", "[gpu]") {
  Stream s;
  const DeviceVector<double> norm_sq(std::vector<double>{16.0});  // norm 4
  DeviceVector<float> factor(std::vector<float>{0.0f, 0.0f});
  clip_factor(s.get(), norm_sq.get(), 1.0, factor.get());
  clip_factor(s.get(), norm_sq.get(), 10.0, factor.get() + 1);
  s.sync();
  const std::vector<float> got = factor.download();
  CHECK(got[0] == static_cast<float>(1.0 / (4.0 + 1e-6)));
  CHECK(got[1] == 1.0f);
  // A NaN norm gives a NaN factor (std::min(coef, 1.0), as the CPU executor and torch's clamp).
  const DeviceVector<double> nan_sq(std::vector<double>{std::numeric_limits<double>::quiet_NaN()});
  DeviceVector<float> nan_factor(std::vector<float>{0.0f});
  clip_factor(s.get(), nan_sq.get(), 1.0, nan_factor.get());
  s.sync();
  CHECK(std::isnan(nan_factor.download()[0]));
}

TEST_CASE("cast rounds to the destination dtype, same dtype copies", "[gpu]") {
  std::mt19937 rng(9);
  for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1001}})
    for (const DType from : {DType::f32, DType::bf16, DType::f16})
      for (const DType to : {DType::f32, DType::bf16, DType::f16}) {
        INFO("cast n " << n << " " << dtype_label(from) << " -> " << dtype_label(to));
        const FVec x = random_values(rng, n, from, -50.0f, 50.0f);
        Stream s;
        const DeviceArray xd(x, from);
        DeviceArray yd(FVec(static_cast<size_t>(n), 3.0f), to);
        cast(s.get(), xd.cptr(), yd.ptr(), n);
        s.sync();
        CHECK(yd.download() == rounded(x, to));  // round to nearest even, as cpu::round_to_*
      }
}

TEST_CASE("add_inplace accumulates in fp32 and rounds once to the destination", "[gpu]") {
  std::mt19937 rng(10);
  for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1001}})
    for (const DType src_dt : {DType::f32, DType::bf16})
      for (const DType dst_dt : {DType::f32, DType::bf16, DType::f16}) {
        INFO("add_inplace n " << n << " " << dtype_label(src_dt) << " -> " << dtype_label(dst_dt));
        const FVec src = random_values(rng, n, src_dt), dst0 = random_values(rng, n, dst_dt);
        FVec ref(static_cast<size_t>(n));
        for (size_t i = 0; i < ref.size(); ++i) ref[i] = round_to(dst_dt, dst0[i] + src[i]);
        Stream s;
        const DeviceArray sd(src, src_dt);
        DeviceArray dd(dst0, dst_dt);
        add_inplace(s.get(), sd.cptr(), dd.ptr(), n);
        s.sync();
        CHECK(dd.download() == ref);  // one fp32 add, one rounding: exact
      }
}

TEST_CASE("scale_inplace multiplies by a host or a device factor", "[gpu]") {
  std::mt19937 rng(11);
  for (const DType dt : {DType::f32, DType::bf16})
    for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1001}}) {
      INFO("scale_inplace n " << n << " " << dtype_label(dt));
      const FVec x = random_values(rng, n, dt);
      FVec host_ref(x.size()), dev_ref(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        host_ref[i] = round_to(dt, x[i] * 0.75f);
        dev_ref[i] = round_to(dt, x[i] * -2.5f);
      }
      Stream s;
      DeviceArray a(x, dt), b(x, dt);
      const DeviceVector<float> factor(std::vector<float>{-2.5f});
      scale_inplace(s.get(), a.ptr(), n, 0.75f, nullptr);
      scale_inplace(s.get(), b.ptr(), n, 0.75f, factor.get());  // the device factor wins
      s.sync();
      CHECK(a.download() == host_ref);
      CHECK(b.download() == dev_ref);
    }
}

}  // namespace shardscope::engine::cuda::test
