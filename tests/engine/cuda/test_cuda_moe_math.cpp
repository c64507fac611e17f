// engine/cuda/ops/moe_math.h on the host (no GPU, no CUDA runtime): the
// per-row and index math the mixture-of-experts kernels run, against the CPU
// engine's ops (engine/cpu/ops_moe.cpp) and exec::forced_routing. On the host
// these functions follow the CPU op's arithmetic step by step, so the
// comparisons are exact (bit for bit); the device differs only by its exp.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/moe_math.h"
#include "engine/exec/exec_moe_ops.h"
#include "plan/expr.h"

using namespace shardscope;
namespace moe = engine::cuda::moe;

namespace {

std::vector<float> random_logits(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct RouterOut {
  std::vector<float> probs, weights;
  std::vector<int64_t> indices;
};

// The router's forward through moe_math.h, row by row as the kernel does.
RouterOut router_by_rows(const std::vector<float>& logits, int64_t n, int64_t experts, int64_t k,
                         bool normalize, bool choose_topk, std::vector<int64_t> indices) {
  RouterOut out{std::vector<float>(logits.size()), std::vector<float>(static_cast<size_t>(n * k)),
                std::move(indices)};
  out.indices.resize(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n; ++i)
    moe::router_forward_row(
        [&](int64_t e) { return logits[static_cast<size_t>(i * experts + e)]; }, experts, k,
        normalize, choose_topk, out.indices.data() + i * k,
        [&](int64_t e, float p) { out.probs[static_cast<size_t>(i * experts + e)] = p; },
        [&](int64_t j, float w) { out.weights[static_cast<size_t>(i * k + j)] = w; });
  return out;
}

RouterOut router_cpu(const std::vector<float>& logits, int64_t n, int64_t experts, int64_t k,
                     bool normalize, bool choose_topk, std::vector<int64_t> indices) {
  RouterOut out{std::vector<float>(logits.size()), std::vector<float>(static_cast<size_t>(n * k)),
                std::move(indices)};
  out.indices.resize(static_cast<size_t>(n * k));
  engine::cpu::moe_router_forward(logits.data(), out.probs.data(), out.indices.data(),
                                  out.weights.data(), n, experts, k, normalize, choose_topk);
  return out;
}

}  // namespace

TEST_CASE("moe_math router forward equals the CPU router bit for bit, top-k and renormalised") {
  std::mt19937 rng(7);
  const int64_t n = 37, experts = 8;
  const std::vector<float> logits = random_logits(rng, static_cast<size_t>(n * experts));
  for (const int64_t k : {1, 2, 3, 8})
    for (const bool normalize : {false, true}) {
      INFO("k " << k << " normalize " << normalize);
      const RouterOut got = router_by_rows(logits, n, experts, k, normalize, true, {});
      const RouterOut ref = router_cpu(logits, n, experts, k, normalize, true, {});
      CHECK(got.indices == ref.indices);
      CHECK(got.probs == ref.probs);
      CHECK(got.weights == ref.weights);
    }
}

TEST_CASE("moe_math top-k breaks ties toward the lower expert, as the CPU router's partial_sort") {
  // Token 0: experts 1, 2 and 3 tie at the top; token 1: all four tie.
  const std::vector<float> logits = {0.5f, 1.5f, 1.5f, 1.5f, 0.25f, 0.25f, 0.25f, 0.25f};
  const RouterOut got = router_by_rows(logits, 2, 4, 2, false, true, {});
  CHECK(got.indices == std::vector<int64_t>{1, 2, 0, 1});
  const RouterOut ref = router_cpu(logits, 2, 4, 2, false, true, {});
  CHECK(got.indices == ref.indices);
  CHECK(got.weights == ref.weights);
  // Probabilities of tied logits are equal, and each is 1/4 on the flat row.
  CHECK(got.weights[2] == 0.25f);
  CHECK(got.weights[3] == 0.25f);
}

TEST_CASE("moe_math router forward with given (forced) experts keeps them and weighs them") {
  std::mt19937 rng(11);
  const int64_t n = 6, experts = 4, k = 2;
  const std::vector<float> logits = random_logits(rng, static_cast<size_t>(n * experts));
  // Not the top-k: the weights must be the given experts' probabilities.
  const std::vector<int64_t> forced = {3, 0, 2, 1, 0, 1, 1, 3, 2, 0, 3, 2};
  for (const bool normalize : {false, true}) {
    const RouterOut got = router_by_rows(logits, n, experts, k, normalize, false, forced);
    const RouterOut ref = router_cpu(logits, n, experts, k, normalize, false, forced);
    CHECK(got.indices == forced);
    CHECK(got.weights == ref.weights);
    CHECK(got.probs == ref.probs);
  }
}

TEST_CASE("moe_math router backward equals the CPU router's gradient bit for bit") {
  std::mt19937 rng(13);
  const int64_t n = 29, experts = 6;
  const std::vector<float> logits = random_logits(rng, static_cast<size_t>(n * experts));
  for (const int64_t k : {1, 2, 4})
    for (const bool normalize : {false, true}) {
      INFO("k " << k << " normalize " << normalize);
      const RouterOut fwd = router_cpu(logits, n, experts, k, normalize, true, {});
      const std::vector<float> dweights = random_logits(rng, static_cast<size_t>(n * k));
      // Pre-filled gradients: both accumulate.
      std::vector<float> ref = random_logits(rng, static_cast<size_t>(n * experts)), got = ref;
      engine::cpu::moe_router_backward(fwd.probs.data(), fwd.indices.data(), dweights.data(),
                                       ref.data(), n, experts, k, normalize);
      for (int64_t i = 0; i < n; ++i)
        moe::router_backward_row(
            [&](int64_t e) { return fwd.probs[static_cast<size_t>(i * experts + e)]; },
            fwd.indices.data() + i * k,
            [&](int64_t j) { return dweights[static_cast<size_t>(i * k + j)]; }, experts, k,
            normalize, [&](int64_t e, float v) { got[static_cast<size_t>(i * experts + e)] += v; });
      CHECK(got == ref);
    }
}

TEST_CASE("moe_math forced_expert reproduces exec::forced_routing, uniform and weighted balances") {
  const int64_t batch = 3;
  struct Case {
    int64_t seq, experts, k;
    plan::TokenBalance balance;
  };
  plan::TokenBalance uniform;
  plan::TokenBalance skewed;  // shares 0.1, 0.2, 0.3, 0.4 of the slots
  skewed.mode = plan::TokenBalance::Mode::weights;
  skewed.cumulative = {0, 100'000'000, 300'000'000, 600'000'000, 1'000'000'000};
  const std::vector<Case> cases = {{16, 4, 2, uniform},
                                   {13, 5, 2, uniform},  // 26 slots over 5 experts: a remainder
                                   {7, 3, 1, uniform},
                                   {20, 4, 2, skewed},
                                   {11, 4, 1, skewed}};
  for (const Case& c : cases) {
    INFO("seq " << c.seq << " experts " << c.experts << " k " << c.k);
    std::vector<int64_t> ref(static_cast<size_t>(batch * c.seq * c.k), -1);
    engine::exec::forced_routing(batch, c.seq, c.experts, c.k, &c.balance, ref.data());
    const std::vector<int64_t> ends =
        engine::exec::forced_routing_ends(c.seq, c.experts, c.k, &c.balance);
    REQUIRE(ends.back() == c.seq * c.k);
    std::vector<int64_t> got(ref.size(), -1);
    for (int64_t i = 0; i < batch * c.seq; ++i)  // the router kernel's formula
      for (int64_t j = 0; j < c.k; ++j)
        got[static_cast<size_t>(i * c.k + j)] =
            moe::forced_expert(ends.data(), c.experts, j * c.seq + i % c.seq);
    CHECK(got == ref);
  }
  // Hand-computed: 26 slots over 5 experts, floor shares 5, 5, 5, 5, 6.
  CHECK(engine::exec::forced_routing_ends(13, 5, 2, &uniform) ==
        std::vector<int64_t>{5, 10, 15, 20, 26});
  const std::vector<int64_t> ends = {5, 10, 15, 20, 26};
  CHECK(moe::forced_expert(ends.data(), 5, 4) == 0);
  CHECK(moe::forced_expert(ends.data(), 5, 5) == 1);
  CHECK(moe::forced_expert(ends.data(), 5, 25) == 4);
}

TEST_CASE("forced_routing_ends refuses a share that would route a token twice") {
  plan::TokenBalance skewed;  // expert 0 takes 60% of 2*T slots: more than T
  skewed.mode = plan::TokenBalance::Mode::weights;
  skewed.cumulative = {0, 600'000'000, 1'000'000'000};
  CHECK_THROWS_WITH(engine::exec::forced_routing_ends(10, 2, 2, &skewed),
                    "forced routing: expert 0 would get 12 of 10 tokens, a token twice "
                    "(token_balance share above 1/top_k)");
}

TEST_CASE("moe_math dispatch_slot walks the slots in the CPU dispatch's row order") {
  // Real top-k indices of 2 sequences of 9 tokens, 5 experts, k = 2: each
  // expert's slots, found by a serial scan in dispatch_slot order (the
  // kernel's block scan gives the same ranks), equal the CPU op's.
  std::mt19937 rng(17);
  const int64_t seq = 9, batch = 2, tokens = seq * batch, experts = 5, k = 2, c = 3;
  const std::vector<float> logits = random_logits(rng, static_cast<size_t>(tokens * experts));
  const RouterOut r = router_cpu(logits, tokens, experts, k, false, true, {});
  const std::vector<float> x = random_logits(rng, static_cast<size_t>(tokens * c));
  // By hand: entry q = 0 is (b 0, j 0, t 0) -> slot 0; q = 1 is t 1 -> slot 2;
  // q = 9 is (b 0, j 1, t 0) -> slot 1; q = 18 is (b 1, j 0, t 9) -> slot 18.
  CHECK(moe::dispatch_slot(0, seq, k) == 0);
  CHECK(moe::dispatch_slot(1, seq, k) == 2);
  CHECK(moe::dispatch_slot(9, seq, k) == 1);
  CHECK(moe::dispatch_slot(18, seq, k) == 18);
  for (int64_t e = 0; e < experts; ++e) {
    INFO("expert " << e);
    const int64_t rows = tokens;  // top-k sizing: every token
    std::vector<float> xe(static_cast<size_t>(rows * c));
    std::vector<int64_t> ref(static_cast<size_t>(rows));
    const int64_t found = engine::cpu::moe_dispatch_forward(x.data(), r.indices.data(), xe.data(),
                                                            ref.data(), tokens, seq, c, k, e, rows);
    std::vector<int64_t> got(static_cast<size_t>(rows), -1);
    int64_t n = 0;
    for (int64_t q = 0; q < tokens * k; ++q) {
      const int64_t slot = moe::dispatch_slot(q, seq, k);
      if (r.indices[static_cast<size_t>(slot)] == e) got[static_cast<size_t>(n++)] = slot;
    }
    CHECK(n == found);
    CHECK(got == ref);
  }
}

TEST_CASE("moe_math sigmoid_of equals the CPU gate's kept sigmoid bit for bit") {
  const std::vector<float> g = {-30.0f, -2.5f, -1e-3f, 0.0f, 0.75f, 4.0f, 30.0f};
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<float> x(g.size(), 1.0f), y(g.size()), sig(g.size());
  engine::cpu::sigmoid_gate_forward(g.data(), x.data(), y.data(), sig.data(), n, 1);
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("g " << g[i]);
    CHECK(moe::sigmoid_of(g[i]) == sig[i]);
  }
  CHECK(moe::sigmoid_of(0.0f) == 0.5f);
}
