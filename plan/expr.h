// Size expressions over the two workload variables of a step: B (per-rank
// micro-batch) and T (sequence length). FLOPs, bytes moved and activation
// sizes of graph ops are polynomials in (B, T) with integer coefficients, so a
// graph is written once and evaluated for any batch and sequence length.
//
// Text form (used in graph JSON): terms joined by '+', each term a product of
// integers and the symbols B and T, e.g. "2*B*T*768*2304 + 4*B*T*T*768".
// The canonical form written back is "c*B^i*T^j" terms sorted by (i, j).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace shardscope::plan {

struct Workload {
  int64_t batch = 1;  // B: per-rank micro-batch
  int64_t seq = 1;    // T: sequence length in tokens
};

class Poly {
 public:
  Poly() = default;
  static Poly constant(int64_t c);
  // c * B^b_pow * T^t_pow
  static Poly term(int64_t c, int b_pow, int t_pow);
  // Parses the text form; throws std::invalid_argument with the offending
  // character position on malformed input.
  static Poly parse(const std::string& text);

  Poly operator+(const Poly& other) const;
  Poly operator*(const Poly& other) const;
  Poly operator*(int64_t k) const;
  bool operator==(const Poly& other) const { return terms_ == other.terms_; }
  bool operator!=(const Poly& other) const { return !(*this == other); }

  // Exact integer value; throws std::overflow_error when it does not fit int64.
  int64_t eval(const Workload& w) const;
  double eval_double(const Workload& w) const;
  bool is_zero() const { return terms_.empty(); }
  std::string to_string() const;

  // (b_pow, t_pow) -> coefficient; zero coefficients are never stored.
  const std::map<std::pair<int, int>, int64_t>& terms() const { return terms_; }

 private:
  std::map<std::pair<int, int>, int64_t> terms_;
};

}  // namespace shardscope::plan
