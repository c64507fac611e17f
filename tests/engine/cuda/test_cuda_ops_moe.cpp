// Mixture-of-experts kernels (engine/cuda/ops/moe.cu) against the CPU ops on
// the same inputs: router (top-k with ties, forced routing from the plan's
// cumulative counts, renormalised or not) forward and backward, dispatch and
// its error flag, combine forward (f32 out and a 16-bit out through the fp32
// workspace) and backward, sigmoid gate; f32 and bf16 operands; gradients
// pre-filled so that accumulation is checked; the combine run twice gives the
// same bits (no float atomics).
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/ops.h"
#include "engine/exec/exec_moe_ops.h"
#include "tests/engine/cuda/cuda_ops_test_util.h"

namespace shardscope::engine::cuda::test {
namespace {

using I64 = std::vector<int64_t>;

struct RouterRef {
  FVec probs, weights;
  I64 indices;
};

RouterRef cpu_router(const FVec& logits, int64_t n, int64_t experts, int64_t k, bool normalize,
                     const I64* forced) {
  RouterRef r{FVec(logits.size()), FVec(static_cast<size_t>(n * k)),
              forced ? *forced : I64(static_cast<size_t>(n * k))};
  cpu::moe_router_forward(logits.data(), r.probs.data(), r.indices.data(), r.weights.data(), n,
                          experts, k, normalize, forced == nullptr);
  return r;
}

void check_router(DType dt, bool forced_routing, bool normalize, uint32_t seed) {
  INFO("router " << dtype_label(dt) << " forced " << forced_routing << " normalize " << normalize);
  const int64_t seq = 24, batch = 2, n = seq * batch, experts = 6, k = 2;
  std::mt19937 rng(seed);
  FVec logits = random_values(rng, n * experts, dt, -2.0f, 2.0f);
  // Ties: token 0 has three equal maxima above every other logit (the lower
  // experts win).
  for (int64_t e = 1; e < 4; ++e) logits[static_cast<size_t>(e)] = 2.5f;
  plan::TokenBalance uniform;
  const I64 ends = exec::forced_routing_ends(seq, experts, k, &uniform);
  I64 forced(static_cast<size_t>(n * k));
  exec::forced_routing(batch, seq, experts, k, &uniform, forced.data());
  const RouterRef ref =
      cpu_router(logits, n, experts, k, normalize, forced_routing ? &forced : nullptr);
  if (!forced_routing) CHECK(I64(ref.indices.begin(), ref.indices.begin() + 2) == I64{1, 2});

  Stream s;
  const DeviceArray ld(logits, dt);
  DeviceArray pd(FVec(logits.size(), 7.0f), dt), wd(FVec(static_cast<size_t>(n * k), 7.0f), dt);
  DeviceVector<int64_t> idx(I64(static_cast<size_t>(n * k), -5)), ends_d(ends),
      counts(I64(static_cast<size_t>(experts), 0));
  moe_router_forward(s.get(), ld.cptr(), pd.ptr(), idx.get(), wd.ptr(), n, experts, k, normalize,
                     forced_routing ? ends_d.get() : nullptr, seq, counts.get());
  s.sync();
  CHECK(idx.download() == ref.indices);
  check_close(pd.download(), rounded(ref.probs, dt), tol_for(dt), "probs");
  check_close(wd.download(), rounded(ref.weights, dt), tol_for(dt), "weights");
  I64 histogram(static_cast<size_t>(experts), 0);
  for (int64_t e : ref.indices) ++histogram[static_cast<size_t>(e)];
  CHECK(counts.download() == histogram);
  if (forced_routing) CHECK(histogram == I64(static_cast<size_t>(experts), batch * seq * k / 6));

  // Backward from the stored (rounded) probabilities, as the executor does.
  const FVec probs_stored = rounded(ref.probs, dt);
  const FVec dweights = random_values(rng, n * k, dt);
  const FVec dlogits0 = random_values(rng, n * experts, dt);
  FVec dref = dlogits0;
  cpu::moe_router_backward(probs_stored.data(), ref.indices.data(), dweights.data(), dref.data(), n,
                           experts, k, normalize);
  const DeviceArray probs_d(probs_stored, dt), dw_d(dweights, dt);
  DeviceArray dl_d(dlogits0, dt);
  const DeviceVector<int64_t> idx_ref(ref.indices);
  moe_router_backward(s.get(), probs_d.cptr(), idx_ref.get(), dw_d.cptr(), dl_d.ptr(), n, experts,
                      k, normalize);
  s.sync();
  check_close(dl_d.download(), rounded(dref, dt), tol_for(dt, 2.0), "dlogits");
}

}  // namespace

TEST_CASE("moe router forward and backward match cpu: top-k with ties, forced routing", "[gpu]") {
  uint32_t seed = 100;
  for (const DType dt : {DType::f32, DType::bf16})
    for (const bool forced : {false, true})
      for (const bool normalize : {false, true}) check_router(dt, forced, normalize, ++seed);
}

TEST_CASE("moe dispatch matches cpu rows and slots; a count against the plan sets the flag",
          "[gpu]") {
  const int64_t seq = 10, batch = 3, tokens = seq * batch, experts = 4, k = 2, c = 40;
  std::mt19937 rng(200);
  const FVec logits = random_values(rng, tokens * experts, DType::f32, -2.0f, 2.0f);
  const RouterRef r = cpu_router(logits, tokens, experts, k, false, nullptr);
  for (const DType dt : {DType::f32, DType::bf16}) {
    const FVec x = random_values(rng, tokens * c, dt);
    Stream s;
    const DeviceArray xd(x, dt);
    const DeviceVector<int64_t> idx(r.indices);
    for (int64_t e = 0; e < experts; ++e) {
      INFO(dtype_label(dt) << " expert " << e);
      const int64_t rows = tokens;  // top-k sizing
      FVec xe_ref(static_cast<size_t>(rows * c));
      I64 slots_ref(static_cast<size_t>(rows));
      const int64_t found = cpu::moe_dispatch_forward(x.data(), r.indices.data(), xe_ref.data(),
                                                      slots_ref.data(), tokens, seq, c, k, e, rows);
      DeviceArray xe(FVec(static_cast<size_t>(rows * c), 3.0f), dt);
      DeviceVector<int64_t> slots(I64(static_cast<size_t>(rows), 99));
      DeviceVector<int32_t> flag(std::vector<int32_t>{0});
      moe_dispatch_forward(s.get(), xd.cptr(), idx.get(), xe.ptr(), slots.get(), tokens, seq, c, k,
                           e, rows, false, flag.get());
      s.sync();
      CHECK(slots.download() == slots_ref);
      CHECK(xe.download() == xe_ref);  // a copy: exact
      CHECK(flag.download()[0] == 0);

      const FVec dxe = random_values(rng, rows * c, dt), dx0 = random_values(rng, tokens * c, dt);
      FVec dx_ref = dx0;
      cpu::moe_dispatch_backward(dxe.data(), slots_ref.data(), dx_ref.data(), rows, c, k, tokens);
      const DeviceArray dxe_d(dxe, dt);
      DeviceArray dx_d(dx0, dt);
      moe_dispatch_backward(s.get(), dxe_d.cptr(), slots.get(), dx_d.ptr(), rows, c, k, tokens);
      s.sync();
      check_close(dx_d.download(), rounded(dx_ref, dt), tol_for(dt, 2.0), "dx");

      // Forced routing's exact count: one row short of the count and one
      // over it both set the flag to 1 + the count found.
      for (const int64_t planned : {found - 1, found + 1}) {
        if (planned < 0) continue;
        DeviceArray xe2(FVec(static_cast<size_t>(planned * c), 0.0f), dt);
        DeviceVector<int64_t> slots2(I64(static_cast<size_t>(std::max<int64_t>(planned, 1)), 0));
        DeviceVector<int32_t> flag2(std::vector<int32_t>{0});
        moe_dispatch_forward(s.get(), xd.cptr(), idx.get(), xe2.ptr(), slots2.get(), tokens, seq, c,
                             k, e, planned, true, flag2.get());
        s.sync();
        CHECK(flag2.download()[0] == found + 1);
      }
    }
  }
}

TEST_CASE("moe combine matches cpu (f32 out, bf16 out via fp32 workspace), same bits twice",
          "[gpu]") {
  const int64_t seq = 12, batch = 2, tokens = seq * batch, experts = 4, k = 2, c = 33;
  std::mt19937 rng(300);
  const FVec logits = random_values(rng, tokens * experts, DType::f32, -2.0f, 2.0f);
  const RouterRef r = cpu_router(logits, tokens, experts, k, true, nullptr);
  for (const DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_label(dt));
    const int64_t rows = tokens;
    std::vector<I64> slots(static_cast<size_t>(experts), I64(static_cast<size_t>(rows)));
    std::vector<FVec> y;
    for (int64_t e = 0; e < experts; ++e) {
      FVec xe(static_cast<size_t>(rows * c));
      const FVec x = random_values(rng, tokens * c, DType::f32);
      cpu::moe_dispatch_forward(x.data(), r.indices.data(), xe.data(),
                                slots[static_cast<size_t>(e)].data(), tokens, seq, c, k, e, rows);
      y.push_back(random_values(rng, rows * c, dt));
    }
    const FVec weights = rounded(r.weights, dt);
    std::vector<const float*> y_ptr;
    std::vector<const int64_t*> slot_ptr;
    std::vector<FVec> weighted_ref(static_cast<size_t>(experts),
                                   FVec(static_cast<size_t>(rows * c)));
    std::vector<float*> weighted_ptr;
    const I64 rows_v(static_cast<size_t>(experts), rows);
    for (int64_t e = 0; e < experts; ++e) {
      y_ptr.push_back(y[static_cast<size_t>(e)].data());
      slot_ptr.push_back(slots[static_cast<size_t>(e)].data());
      weighted_ptr.push_back(weighted_ref[static_cast<size_t>(e)].data());
    }
    FVec out_ref(static_cast<size_t>(tokens * c));
    cpu::moe_combine_forward(y_ptr.data(), slot_ptr.data(), rows_v.data(), experts, weights.data(),
                             out_ref.data(), tokens, c, k, weighted_ptr.data());

    Stream s;
    std::vector<DeviceArray> y_d, weighted_d, dy_d;
    std::vector<DeviceVector<int64_t>> slots_d;
    std::vector<ConstDevPtr> y_p;
    std::vector<DevPtr> weighted_p, dy_p;
    std::vector<const int64_t*> slots_p;
    for (int64_t e = 0; e < experts; ++e) {
      y_d.emplace_back(y[static_cast<size_t>(e)], dt);
      weighted_d.emplace_back(FVec(static_cast<size_t>(rows * c), 5.0f), dt);
      slots_d.emplace_back(slots[static_cast<size_t>(e)]);
    }
    for (int64_t e = 0; e < experts; ++e) {
      y_p.push_back(y_d[static_cast<size_t>(e)].cptr());
      weighted_p.push_back(weighted_d[static_cast<size_t>(e)].ptr());
      slots_p.push_back(slots_d[static_cast<size_t>(e)].get());
    }
    const DeviceArray w_d(weights, dt);
    DeviceArray out_d(FVec(static_cast<size_t>(tokens * c), 9.0f), dt);
    const size_t ws_bytes = moe_combine_forward_workspace_bytes(dt, tokens, c);
    DeviceBuffer ws(ws_bytes);
    moe_combine_forward(s.get(), y_p.data(), slots_p.data(), rows_v.data(), experts, w_d.cptr(),
                        out_d.ptr(), tokens, c, k, weighted_p.data(),
                        Workspace{ws.get(), ws_bytes});
    s.sync();
    const FVec out1 = out_d.download();
    check_close(out1, rounded(out_ref, dt), tol_for(dt), "out");
    for (int64_t e = 0; e < experts; ++e)
      check_close(weighted_d[static_cast<size_t>(e)].download(),
                  rounded(weighted_ref[static_cast<size_t>(e)], dt), tol_for(dt), "weighted");
    moe_combine_forward(s.get(), y_p.data(), slots_p.data(), rows_v.data(), experts, w_d.cptr(),
                        out_d.ptr(), tokens, c, k, weighted_p.data(),
                        Workspace{ws.get(), ws_bytes});
    s.sync();
    CHECK(out_d.download() == out1);

    // Backward: dy[e] and dweights pre-filled.
    const FVec dout = random_values(rng, tokens * c, dt);
    const FVec dw0 = random_values(rng, tokens * k, dt);
    std::vector<FVec> dy_ref;
    std::vector<float*> dy_ref_ptr;
    for (int64_t e = 0; e < experts; ++e) {
      dy_ref.push_back(random_values(rng, rows * c, dt));
      dy_d.emplace_back(dy_ref.back(), dt);
    }
    for (int64_t e = 0; e < experts; ++e) {
      dy_ref_ptr.push_back(dy_ref[static_cast<size_t>(e)].data());
      dy_p.push_back(dy_d[static_cast<size_t>(e)].ptr());
    }
    FVec dw_ref = dw0;
    cpu::moe_combine_backward(y_ptr.data(), slot_ptr.data(), rows_v.data(), experts, weights.data(),
                              dout.data(), dy_ref_ptr.data(), dw_ref.data(), tokens, c, k);
    const DeviceArray dout_d(dout, dt);
    DeviceArray dw_d(dw0, dt);
    moe_combine_backward(s.get(), y_p.data(), slots_p.data(), rows_v.data(), experts, w_d.cptr(),
                         dout_d.cptr(), dy_p.data(), dw_d.ptr(), tokens, c, k);
    s.sync();
    for (int64_t e = 0; e < experts; ++e)
      check_close(dy_d[static_cast<size_t>(e)].download(),
                  rounded(dy_ref[static_cast<size_t>(e)], dt), tol_for(dt, 2.0), "dy");
    check_close(dw_d.download(), rounded(dw_ref, dt), tol_for(dt, std::sqrt(double(c))),
                "dweights");
  }
}

TEST_CASE("sigmoid gate forward and backward match cpu", "[gpu]") {
  uint32_t seed = 400;
  for (const DType dt : {DType::f32, DType::bf16})
    for (const int64_t c : {1, 64, 77}) {
      INFO("sigmoid gate " << dtype_label(dt) << " c " << c);
      const int64_t n = 19;
      std::mt19937 rng(++seed);
      const FVec g = random_values(rng, n, dt, -4.0f, 4.0f), x = random_values(rng, n * c, dt);
      FVec y_ref(static_cast<size_t>(n * c)), sig_ref(static_cast<size_t>(n));
      cpu::sigmoid_gate_forward(g.data(), x.data(), y_ref.data(), sig_ref.data(), n, c);
      Stream s;
      const DeviceArray gd(g, dt), xd(x, dt);
      DeviceArray yd(FVec(static_cast<size_t>(n * c), 2.0f), dt),
          sd(FVec(static_cast<size_t>(n), 2.0f), dt);
      sigmoid_gate_forward(s.get(), gd.cptr(), xd.cptr(), yd.ptr(), sd.ptr(), n, c);
      s.sync();
      check_close(yd.download(), rounded(y_ref, dt), tol_for(dt), "y");
      check_close(sd.download(), rounded(sig_ref, dt), tol_for(dt), "sig");

      const FVec sig_stored = rounded(sig_ref, dt);
      const FVec dy = random_values(rng, n * c, dt), dg0 = random_values(rng, n, dt),
                 dx0 = random_values(rng, n * c, dt);
      FVec dg_ref = dg0, dx_ref = dx0;
      cpu::sigmoid_gate_backward(sig_stored.data(), x.data(), dy.data(), dg_ref.data(),
                                 dx_ref.data(), n, c);
      const DeviceArray sig_d(sig_stored, dt), dyd(dy, dt);
      DeviceArray dgd(dg0, dt), dxd(dx0, dt);
      sigmoid_gate_backward(s.get(), sig_d.cptr(), xd.cptr(), dyd.cptr(), dgd.ptr(), dxd.ptr(), n,
                            c);
      s.sync();
      check_close(dgd.download(), rounded(dg_ref, dt), tol_for(dt, std::sqrt(double(c))), "dg");
      check_close(dxd.download(), rounded(dx_ref, dt), tol_for(dt, 2.0), "dx");
    }
}

}  // namespace shardscope::engine::cuda::test
