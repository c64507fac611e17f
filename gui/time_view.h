// The visible time range of a timeline: a start time and a scale. Pure
// arithmetic, no drawing; times are nanoseconds as doubles (exact up to 2^53
// ns = 104 days), pixels are relative to the left edge of the drawing area.
#pragma once

#include <cstdint>

namespace shardscope::gui {

struct TimeView {
  double start_ns = 0;   // time at x = 0
  double ns_per_px = 1;  // > 0

  double x_of(double t_ns) const { return (t_ns - start_ns) / ns_per_px; }
  double t_of(double x_px) const { return start_ns + x_px * ns_per_px; }
  double end_ns(double width_px) const { return start_ns + width_px * ns_per_px; }
};

// Scales are clamped to [kMinNsPerPx, kMaxNsPerPx]: 1/1000 ns per pixel at
// the finest, about 3 hours per 1000 pixels at the coarsest.
constexpr double kMinNsPerPx = 1e-3;
constexpr double kMaxNsPerPx = 1e10;

// The range [t0, t1] spread over `width_px` (t1 <= t0 shows 1 us around t0).
TimeView view_of_range(double t0_ns, double t1_ns, double width_px);
// Zoom by `factor` (> 1 zooms in) keeping the time under `x_px` fixed.
TimeView zoom_at(const TimeView& v, double x_px, double factor);
// Pan by `dx_px` pixels (positive: the content moves right, earlier times show).
TimeView pan_by(const TimeView& v, double dx_px);
// [t0, t1] with a margin of `margin` (fraction of the range) each side.
TimeView fit_range(double t0_ns, double t1_ns, double width_px, double margin = 0.02);

}  // namespace shardscope::gui
