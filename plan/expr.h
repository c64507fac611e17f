// Size expressions over the two workload variables of a step: B (per-rank
// micro-batch) and T (sequence length). FLOPs, bytes moved and activation
// sizes of graph ops are polynomials in (B, T) with integer coefficients, so a
// graph is written once and evaluated for any batch and sequence length.
//
// Text form (used in graph JSON): terms joined by '+', each term a product of
// integers and the symbols B and T, e.g. "2*B*T*768*2304 + 4*B*T*T*768".
// The canonical form written back is "c*B^i*T^j" terms sorted by (i, j).
//
// Mixture-of-experts sizes add one more factor, at most one per term:
// routed(e,E,k), the tokens of one sequence of T that top-k routing sends to
// expert e of E under the workload's token balance (routed_tokens below), so
// expert e's rows in a micro-batch are "B*routed(e,E,k)". Routed terms are
// written after the plain ones, sorted by (i, j, e, E, k).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace shardscope::plan {

// How the tokens of a sequence are split among the experts of a routed layer
// (the policy's token_balance and moe_routing: docs/policy.md). With n = T*k
// assignments per sequence and cumulative shares c_0 = 0 <= c_1 <= ... <=
// c_E = 1, expert e gets floor(n*c_{e+1}) - floor(n*c_e) tokens of each
// sequence: the counts sum to n exactly.
//  - uniform: c_e = e/E (exact rationals): floor or ceil of T*k/E each;
//  - weights: c_e = the explicit weights' prefix sums, each rounded to a
//    multiple of 1/kShareScale (weights with up to 9 decimals are exact);
//  - all_tokens: every expert sized for all T tokens of a sequence, the most
//    top-k routing can send it (real routing: moe_routing "topk").
struct TokenBalance {
  enum class Mode : uint8_t { uniform, weights, all_tokens };
  static constexpr int64_t kShareScale = 1'000'000'000;
  Mode mode = Mode::uniform;
  std::vector<int64_t> cumulative;  // weights: E + 1 entries, 0 ... kShareScale
  bool operator==(const TokenBalance& o) const {
    return mode == o.mode && cumulative == o.cumulative;
  }
  bool operator!=(const TokenBalance& o) const { return !(*this == o); }
};

struct Workload {
  int64_t batch = 1;  // B: per-rank micro-batch
  int64_t seq = 1;    // T: sequence length in tokens
  // Mixture of experts only; null is uniform.
  std::shared_ptr<const TokenBalance> balance = nullptr;
  // Same (B, T) and the same balance (null and an explicit uniform alike).
  bool same_as(const Workload& other) const;
};

// Tokens of one sequence of `seq` that top-`top_k` routing sends to expert
// `expert` of `experts` under `balance` (null: uniform). Throws
// std::invalid_argument when the balance's weights are not one per expert,
// std::overflow_error when seq * top_k * share overflows.
int64_t routed_tokens(int64_t seq, int64_t expert, int64_t experts, int64_t top_k,
                      const TokenBalance* balance);

class Poly {
 public:
  Poly() = default;
  static Poly constant(int64_t c);
  // c * B^b_pow * T^t_pow
  static Poly term(int64_t c, int b_pow, int t_pow);
  // c * B^b_pow * T^t_pow * routed(expert, experts, top_k); throws
  // std::invalid_argument unless 0 <= expert < experts and 1 <= top_k <= experts.
  static Poly routed(int64_t c, int b_pow, int t_pow, int64_t expert, int64_t experts,
                     int64_t top_k);
  // Parses the text form; throws std::invalid_argument with the offending
  // character position on malformed input.
  static Poly parse(const std::string& text);

  Poly operator+(const Poly& other) const;
  // In place: O(terms of other x log(terms)), no copy of this polynomial, so
  // summing n terms one by one (n experts' rows) is O(n log n), not O(n^2).
  Poly& operator+=(const Poly& other);
  // A product of two routed terms throws std::domain_error (no size needs one).
  Poly operator*(const Poly& other) const;
  Poly operator*(int64_t k) const;
  bool operator==(const Poly& other) const {
    return terms_ == other.terms_ && routed_ == other.routed_;
  }
  bool operator!=(const Poly& other) const { return !(*this == other); }

  // Exact integer value; throws std::overflow_error when it does not fit int64.
  int64_t eval(const Workload& w) const;
  double eval_double(const Workload& w) const;
  bool is_zero() const { return terms_.empty() && routed_.empty(); }
  std::string to_string() const;

  // (b_pow, t_pow) -> coefficient; zero coefficients are never stored.
  const std::map<std::pair<int, int>, int64_t>& terms() const { return terms_; }
  // (b_pow, t_pow, expert, experts, top_k) -> coefficient of the routed terms.
  using RoutedKey = std::tuple<int, int, int64_t, int64_t, int64_t>;
  const std::map<RoutedKey, int64_t>& routed_terms() const { return routed_; }

 private:
  std::map<std::pair<int, int>, int64_t> terms_;
  std::map<RoutedKey, int64_t> routed_;
};

}  // namespace shardscope::plan
