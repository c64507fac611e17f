// Simulated time: a strong typedef over integer nanoseconds so that times and
// plain numbers (bytes, FLOPs, counts) cannot be mixed up. Durations computed
// from real-valued rates are rounded to the nearest nanosecond (half away from
// zero, std::llround), which is deterministic across runs and platforms.
#pragma once

#include <cmath>
#include <cstdint>

namespace shardscope::sim {

struct TimeNs {
  int64_t ns = 0;  ///< nanoseconds since the start of the simulated step

  constexpr TimeNs() = default;
  constexpr explicit TimeNs(int64_t nanoseconds) : ns(nanoseconds) {}

  /// `seconds` rounded to the nearest nanosecond; negative or NaN inputs give 0.
  static TimeNs from_seconds(double seconds) {
    if (!(seconds > 0)) return TimeNs(0);
    return TimeNs(static_cast<int64_t>(std::llround(seconds * 1e9)));
  }
  double seconds() const { return static_cast<double>(ns) * 1e-9; }
  double ms() const { return static_cast<double>(ns) * 1e-6; }

  constexpr TimeNs& operator+=(TimeNs o) {
    ns += o.ns;
    return *this;
  }
  constexpr TimeNs& operator-=(TimeNs o) {
    ns -= o.ns;
    return *this;
  }
};

constexpr TimeNs operator+(TimeNs a, TimeNs b) {
  return TimeNs(a.ns + b.ns);
}
constexpr TimeNs operator-(TimeNs a, TimeNs b) {
  return TimeNs(a.ns - b.ns);
}
constexpr bool operator==(TimeNs a, TimeNs b) {
  return a.ns == b.ns;
}
constexpr bool operator!=(TimeNs a, TimeNs b) {
  return a.ns != b.ns;
}
constexpr bool operator<(TimeNs a, TimeNs b) {
  return a.ns < b.ns;
}
constexpr bool operator<=(TimeNs a, TimeNs b) {
  return a.ns <= b.ns;
}
constexpr bool operator>(TimeNs a, TimeNs b) {
  return a.ns > b.ns;
}
constexpr bool operator>=(TimeNs a, TimeNs b) {
  return a.ns >= b.ns;
}
constexpr TimeNs max(TimeNs a, TimeNs b) {
  return a < b ? b : a;
}

}  // namespace shardscope::sim
