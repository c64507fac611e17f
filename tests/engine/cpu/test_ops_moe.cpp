// The CPU ops of the mixture-of-experts graphs (Mixtral, Qwen2-MoE): the
// router's softmax / top-k / renormalisation, the per-expert dispatch and the
// weighted combine, and Qwen2-MoE's sigmoid gate, against float64
// references, closed forms and central differences.
#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "engine/cpu/ops.h"
#include "tests/engine/cpu/grad_check.h"

namespace shardscope::engine::cpu::test {
namespace {

// Router weights of one token set: softmax over experts, the given experts'
// probabilities, divided by their sum when normalize.
Vec router_ref(const Vec& logits, const std::vector<int64_t>& idx, int64_t n, int64_t experts,
               int64_t k, bool normalize, Vec* probs = nullptr) {
  Vec w(static_cast<size_t>(n * k));
  if (probs) probs->assign(static_cast<size_t>(n * experts), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double mx = -1e300, sum = 0;
    for (int64_t e = 0; e < experts; ++e) mx = std::max(mx, logits[i * experts + e]);
    for (int64_t e = 0; e < experts; ++e) sum += std::exp(logits[i * experts + e] - mx);
    auto p = [&](int64_t e) { return std::exp(logits[i * experts + e] - mx) / sum; };
    if (probs)
      for (int64_t e = 0; e < experts; ++e) (*probs)[i * experts + e] = p(e);
    double s = 0;
    for (int64_t j = 0; j < k; ++j) s += p(idx[i * k + j]);
    for (int64_t j = 0; j < k; ++j) w[i * k + j] = p(idx[i * k + j]) / (normalize ? s : 1.0);
  }
  return w;
}

}  // namespace

TEST_CASE("moe router: softmax, top-k in descending order, renormalised weights", "[cpu][moe]") {
  const int64_t n = 5, experts = 6, k = 2;
  std::mt19937_64 rng(81);
  const FVec logits = random_values(rng, n * experts, 0.1, 3.0);
  for (const bool normalize : {false, true}) {
    FVec probs(n * experts), weights(n * k);
    std::vector<int64_t> idx(n * k);
    moe_router_forward(logits.data(), probs.data(), idx.data(), weights.data(), n, experts, k,
                       normalize, /*choose_topk=*/true);
    Vec p_ref;
    // The reference top-k: sort each token's experts by logit.
    std::vector<int64_t> want(n * k);
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int64_t> order(experts);
      for (int64_t e = 0; e < experts; ++e) order[e] = e;
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return logits[i * experts + a] > logits[i * experts + b];
      });
      for (int64_t j = 0; j < k; ++j) want[i * k + j] = order[j];
    }
    CHECK(idx == want);
    check_close(weights, router_ref(to_double(logits), want, n, experts, k, normalize, &p_ref),
                kForwardTol, "weights");
    check_close(probs, p_ref, kForwardTol, "probs");
    if (normalize)
      for (int64_t i = 0; i < n; ++i) CHECK(weights[i * k] + weights[i * k + 1] == Approx(1.0));
  }
  // Ties go to the lower index: all-equal logits pick experts 0 and 1.
  const FVec flat(experts, 0.5f);
  FVec probs(experts), weights(k);
  std::vector<int64_t> idx(k);
  moe_router_forward(flat.data(), probs.data(), idx.data(), weights.data(), 1, experts, k, true,
                     true);
  CHECK(idx == std::vector<int64_t>{0, 1});
  CHECK(weights[0] == 0.5f);
}

TEST_CASE("moe router backward equals central differences, given experts, both forms",
          "[cpu][moe]") {
  const int64_t n = 4, experts = 5, k = 3;
  std::mt19937_64 rng(82);
  const FVec logits = random_values(rng, n * experts, 0.1, 2.0);
  const FVec dw = random_values(rng, n * k);
  // Given (forced) experts, distinct per token and not the top-k.
  const std::vector<int64_t> idx = {4, 0, 2, 1, 3, 0, 2, 4, 1, 3, 2, 0};
  for (const bool normalize : {false, true}) {
    FVec probs(n * experts), weights(n * k);
    std::vector<int64_t> given = idx;
    moe_router_forward(logits.data(), probs.data(), given.data(), weights.data(), n, experts, k,
                       normalize, /*choose_topk=*/false);
    CHECK(given == idx);
    check_close(weights, router_ref(to_double(logits), idx, n, experts, k, normalize), kForwardTol,
                "weights");
    const FVec d0 = random_values(rng, n * experts);
    FVec d = d0;
    moe_router_backward(probs.data(), idx.data(), dw.data(), d.data(), n, experts, k, normalize);
    const Vec dwd = to_double(dw);
    check_close(
        d,
        numeric_grad(
            [&](const Vec& x) { return dot(dwd, router_ref(x, idx, n, experts, k, normalize)); },
            to_double(logits)),
        kGradTol, normalize ? "dlogits (normalised)" : "dlogits", d0);
  }
  // A token naming one expert twice is refused.
  std::vector<int64_t> twice = idx;
  twice[1] = twice[0];
  FVec probs(n * experts), weights(n * k);
  CHECK_THROWS_AS(moe_router_forward(logits.data(), probs.data(), twice.data(), weights.data(), n,
                                     experts, k, false, false),
                  std::invalid_argument);
}

TEST_CASE("moe dispatch gathers an expert's rows choice-major per sequence and backward scatters",
          "[cpu][moe]") {
  // 2 sequences of 3 tokens, top-2 of 3 experts, c = 2. x[t] = (t, 10 t).
  const int64_t tokens = 6, seq = 3, c = 2, k = 2;
  FVec x(tokens * c);
  for (int64_t t = 0; t < tokens; ++t) {
    x[t * c] = static_cast<float>(t);
    x[t * c + 1] = static_cast<float>(10 * t);
  }
  // indices[t] = (choice 0, choice 1)
  const std::vector<int64_t> idx = {1, 0, 2, 1, 1, 2, /* sequence 1 */ 0, 1, 1, 2, 2, 0};
  // Expert 1: sequence 0 choice 0 tokens 0, 2; choice 1 token 1; sequence 1
  // choice 0 token 4; choice 1 token 3. Slots token * 2 + choice.
  FVec xe(6 * c, -7.0f);
  std::vector<int64_t> slots(6, 99);
  const int64_t found =
      moe_dispatch_forward(x.data(), idx.data(), xe.data(), slots.data(), tokens, seq, c, k, 1, 6);
  CHECK(found == 5);
  CHECK(slots == std::vector<int64_t>{0, 4, 3, 8, 7, -1});
  CHECK(xe == FVec{0, 0, 2, 20, 1, 10, 4, 40, 3, 30, 0, 0});  // the padding row zeroed
  // Too few rows for the expert's tokens is an error, not a silent drop.
  CHECK_THROWS_AS(
      moe_dispatch_forward(x.data(), idx.data(), xe.data(), slots.data(), tokens, seq, c, k, 1, 4),
      std::out_of_range);
  // Backward: dx[slot / k] += dxe[row]; the padding row adds nothing.
  FVec dxe(6 * c);
  for (size_t i = 0; i < dxe.size(); ++i) dxe[i] = static_cast<float>(i + 1);
  FVec dx(tokens * c, 1.0f);
  moe_dispatch_backward(dxe.data(), slots.data(), dx.data(), 6, c, k, tokens);
  CHECK(dx == FVec{2, 3, 6, 7, 4, 5, 10, 11, 8, 9, 1, 1});
}

TEST_CASE("moe combine: weighted scatter-add, backward against central differences", "[cpu][moe]") {
  const int64_t tokens = 4, c = 3, k = 2, experts = 2;
  std::mt19937_64 rng(83);
  // Slots are token * 2 + choice. Expert 0: tokens 0, 1, 3 (slots 0, 2, 6)
  // and a padding row; expert 1: slots 1, 3, 4, 7, 5 (token 2 twice, slots 4
  // and 5, to sum two rows into one token).
  const std::vector<int64_t> s0 = {0, 2, 6, -1}, s1 = {1, 3, 4, 7, 5};
  const std::vector<int64_t> rows = {4, 5};
  const FVec y0 = random_values(rng, 4 * c), y1 = random_values(rng, 5 * c);
  const FVec w = random_values(rng, tokens * k);
  const float* y[2] = {y0.data(), y1.data()};
  const int64_t* s[2] = {s0.data(), s1.data()};
  auto ref = [&](const Vec& yy0, const Vec& yy1, const Vec& ww) {
    Vec out(tokens * c, 0.0);
    const Vec* ys[2] = {&yy0, &yy1};
    const std::vector<int64_t>* ss[2] = {&s0, &s1};
    for (int e = 0; e < 2; ++e)
      for (int64_t r = 0; r < rows[e]; ++r) {
        const int64_t slot = (*ss[e])[r];
        if (slot < 0) continue;
        for (int64_t i = 0; i < c; ++i) out[(slot / k) * c + i] += ww[slot] * (*ys[e])[r * c + i];
      }
    return out;
  };
  FVec out(tokens * c, 5.0f);
  moe_combine_forward(y, s, rows.data(), experts, w.data(), out.data(), tokens, c, k);
  check_close(out, ref(to_double(y0), to_double(y1), to_double(w)), kForwardTol, "out");
  const FVec dout = random_values(rng, tokens * c);
  const Vec doutd = to_double(dout);
  const FVec dy0_0 = random_values(rng, y0.size()), dy1_0 = random_values(rng, y1.size()),
             dw0 = random_values(rng, w.size());
  FVec dy0 = dy0_0, dy1 = dy1_0, dw = dw0;
  float* dy[2] = {dy0.data(), dy1.data()};
  moe_combine_backward(y, s, rows.data(), experts, w.data(), dout.data(), dy, dw.data(), tokens, c,
                       k);
  const Vec yd0 = to_double(y0), yd1 = to_double(y1), wd = to_double(w);
  check_close(dy0, numeric_grad([&](const Vec& v) { return dot(doutd, ref(v, yd1, wd)); }, yd0),
              kGradTol, "dy expert 0", dy0_0);
  check_close(dy1, numeric_grad([&](const Vec& v) { return dot(doutd, ref(yd0, v, wd)); }, yd1),
              kGradTol, "dy expert 1", dy1_0);
  check_close(dw, numeric_grad([&](const Vec& v) { return dot(doutd, ref(yd0, yd1, v)); }, wd),
              kGradTol, "dweights", dw0);
  // The padding row's gradient stays as it was.
  for (int64_t i = 0; i < c; ++i) CHECK(dy0[3 * c + i] == dy0_0[3 * c + i]);
}

TEST_CASE("sigmoid gate: y = sigmoid(g) x, backward against central differences", "[cpu][moe]") {
  const int64_t n = 4, c = 5;
  std::mt19937_64 rng(84);
  const FVec g = random_values(rng, n, 0.1, 3.0), x = random_values(rng, n * c),
             dy = random_values(rng, n * c);
  auto ref = [&](const Vec& gg, const Vec& xx) {
    Vec y(n * c);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j) y[i * c + j] = xx[i * c + j] / (1.0 + std::exp(-gg[i]));
    return y;
  };
  FVec y(n * c), sig(n);
  sigmoid_gate_forward(g.data(), x.data(), y.data(), sig.data(), n, c);
  const Vec gd = to_double(g), xd = to_double(x), dyd = to_double(dy);
  check_close(y, ref(gd, xd), kForwardTol, "y");
  const FVec dg0 = random_values(rng, n), dx0 = random_values(rng, n * c);
  FVec dg = dg0, dx = dx0;
  sigmoid_gate_backward(sig.data(), x.data(), dy.data(), dg.data(), dx.data(), n, c);
  check_close(dg, numeric_grad([&](const Vec& v) { return dot(dyd, ref(v, xd)); }, gd), kGradTol,
              "dg", dg0);
  check_close(dx, numeric_grad([&](const Vec& v) { return dot(dyd, ref(gd, v)); }, xd), kGradTol,
              "dx", dx0);
}

}  // namespace shardscope::engine::cpu::test
