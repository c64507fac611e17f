// Tick marks of the time ruler and the formatting of times, durations and
// sizes for labels. Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gui/time_view.h"
#include "traces/human_format.h"

namespace shardscope::gui {

struct Tick {
  double t_ns = 0;
  bool major = false;  // labelled
};

// A 1-2-5 step (in ns, >= 1e-3) so that consecutive ticks are at least
// `min_px` apart at `ns_per_px`.
double tick_step_ns(double ns_per_px, double min_px);
// Minor ticks per major tick for a major step (4 for 2 x 10^k, else 5).
int minor_per_major(double major_ns);
// Ticks over [view start, view start + width_px]: major (labelled) ticks on
// multiples of tick_step_ns(ns_per_px, label_px), so labels are >= label_px
// apart; minor ticks split each major period in minor_per_major parts.
std::vector<Tick> ruler_ticks(const TimeView& v, double width_px, double label_px = 90);

// "1.5 ms", "250 ns", "3 s", "12.25 us": the unit that keeps the value in
// [1, 1000), with enough decimals to tell ticks `resolution_ns` apart
// (resolution 0: 3 significant decimals at most, trailing zeros dropped).
std::string format_time(double ns, double resolution_ns = 0);
// "12 B", "1.50 KiB", "3.73 MiB", "80.00 GiB" (up to PiB).
inline std::string format_bytes(double bytes) {
  return traces::human_bytes(bytes, traces::ByteUnit::pib);
}
// "1,234,567".
std::string format_count(uint64_t n);

}  // namespace shardscope::gui
