// Test helpers for the CPU ops: random inputs (never zero), central finite
// differences in float64, and closeness checks that report the worst element.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace shardscope::engine::cpu::test {

using Vec = std::vector<double>;
using FVec = std::vector<float>;

// Forward values against the float64 reference: |got - ref| <= kForwardTol * max(1, |ref|).
constexpr double kForwardTol = 1e-5;
// Analytic (float) gradient against float64 central differences:
// |analytic - numeric| <= kGradTol * max(1, |numeric|).
constexpr double kGradTol = 1e-4;
// Central-difference step; with float64 the truncation error (~h^2) and the
// rounding error (~1e-16 / h) are both far below kGradTol.
constexpr double kFdStep = 1e-6;

// n values with |x| uniform in [lo, hi] and a random sign: never zero, and away
// from the kink of relu when lo > 0.
inline FVec random_values(std::mt19937_64& rng, size_t n, double lo = 0.1, double hi = 1.0) {
  std::uniform_real_distribution<double> mag(lo, hi);
  std::bernoulli_distribution negative(0.5);
  FVec out(n);
  for (float& x : out) x = static_cast<float>(negative(rng) ? -mag(rng) : mag(rng));
  return out;
}

inline Vec to_double(const FVec& x) {
  return Vec(x.begin(), x.end());
}

inline double dot(const Vec& a, const Vec& b) {
  REQUIRE(a.size() == b.size());
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// d f / d x by central differences, every element of x in turn.
inline Vec numeric_grad(const std::function<double(const Vec&)>& f, Vec x) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + kFdStep;
    const double up = f(x);
    x[i] = x0 - kFdStep;
    const double down = f(x);
    x[i] = x0;
    g[i] = (up - down) / (2.0 * kFdStep);
  }
  return g;
}

// |got[i] - (base[i] + want[i])| <= tol * max(1, |want[i]|) for every i (tol 0:
// exact); base
// (may be empty = zeros) is what a gradient buffer held before an accumulating
// backward. Reports the worst element.
inline void check_close(const FVec& got, const Vec& want, double tol, const std::string& what,
                        const FVec& base = {}) {
  REQUIRE(got.size() == want.size());
  REQUIRE((base.empty() || base.size() == want.size()));
  double worst_ratio = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double expect = (base.empty() ? 0.0 : static_cast<double>(base[i])) + want[i];
    const double err = std::fabs(static_cast<double>(got[i]) - expect);
    const double ratio = err == 0.0 ? 0.0 : err / (tol * std::max(1.0, std::fabs(want[i])));
    if (!(ratio <= worst_ratio)) {  // also catches NaN
      worst_ratio = ratio;
      worst = i;
    }
  }
  std::ostringstream msg;
  msg << what << ": worst element " << worst << " of " << got.size() << ": got "
      << (got.empty() ? 0.0 : got[worst]) << ", want "
      << (want.empty() ? 0.0 : (base.empty() ? 0.0 : base[worst]) + want[worst])
      << " (error / tolerance = " << worst_ratio << ")";
  INFO(msg.str());
  CHECK(worst_ratio <= 1.0);
}

}  // namespace shardscope::engine::cpu::test
