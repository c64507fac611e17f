#include "gui/time_ruler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace shardscope::gui {

double tick_step_ns(double ns_per_px, double min_px) {
  const double want = std::max(ns_per_px * min_px, 1e-3);
  const double base = std::pow(10.0, std::floor(std::log10(want)));
  for (double m : {1.0, 2.0, 5.0})
    if (base * m >= want * (1 - 1e-12)) return base * m;
  return base * 10;
}

int minor_per_major(double major_ns) {
  // 1 and 5 (x 10^k) split in 5, 2 in 4: minor ticks stay on round values.
  const double mant = major_ns / std::pow(10.0, std::floor(std::log10(major_ns) + 1e-9));
  return (mant > 1.5 && mant < 3.0) ? 4 : 5;
}

std::vector<Tick> ruler_ticks(const TimeView& v, double width_px, double label_px) {
  std::vector<Tick> ticks;
  if (!(width_px > 0)) return ticks;
  const double major = tick_step_ns(v.ns_per_px, label_px);
  const int per = minor_per_major(major);
  const double step = major / per;
  const double t_end = v.end_ns(width_px);
  const double first = std::ceil(v.start_ns / step - 1e-9);
  for (double k = first; k * step <= t_end + step * 1e-9 && ticks.size() < 100000; k += 1) {
    const double rem = std::fmod(k, static_cast<double>(per));
    ticks.push_back({k * step, rem == 0});
  }
  return ticks;
}

std::string format_time(double ns, double resolution_ns) {
  static const char* kUnits[] = {"ns", "us", "ms", "s"};
  // A tick a rounding error away from 0 is 0 (never "-0 us").
  if (resolution_ns > 0 && std::fabs(ns) < resolution_ns * 1e-6) ns = 0;
  const double a = std::fabs(ns);
  int u = 0;
  double scale = 1;
  while (u < 3 && a >= scale * 1000) {
    scale *= 1000;
    ++u;
  }
  if (a == 0 && resolution_ns > 0) {
    // Zero in the unit of the resolution.
    while (u < 3 && resolution_ns >= scale * 1000) {
      scale *= 1000;
      ++u;
    }
  }
  int decimals = 3;
  if (resolution_ns > 0) {
    const double r = resolution_ns / scale;
    decimals = r >= 1 ? 0 : std::min(6, static_cast<int>(std::ceil(-std::log10(r) - 1e-9)));
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, ns / scale);
  std::string s = buf;
  if (resolution_ns <= 0 && s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  return s + " " + kUnits[u];
}

std::string format_count(uint64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace shardscope::gui
