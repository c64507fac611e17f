#include "gui/time_view.h"

#include <algorithm>

namespace shardscope::gui {

namespace {
double clamp_scale(double ns_per_px) {
  return std::clamp(ns_per_px, kMinNsPerPx, kMaxNsPerPx);
}
}  // namespace

TimeView view_of_range(double t0_ns, double t1_ns, double width_px) {
  const double w = std::max(width_px, 1.0);
  if (!(t1_ns > t0_ns)) {
    t0_ns -= 500;
    t1_ns = t0_ns + 1000;
  }
  TimeView v;
  v.ns_per_px = clamp_scale((t1_ns - t0_ns) / w);
  // Keep the centre of the range centred when the scale was clamped.
  v.start_ns = 0.5 * (t0_ns + t1_ns) - 0.5 * w * v.ns_per_px;
  return v;
}

TimeView zoom_at(const TimeView& v, double x_px, double factor) {
  const double anchor = v.t_of(x_px);
  TimeView out;
  out.ns_per_px = clamp_scale(v.ns_per_px / factor);
  out.start_ns = anchor - x_px * out.ns_per_px;
  return out;
}

TimeView pan_by(const TimeView& v, double dx_px) {
  TimeView out = v;
  out.start_ns -= dx_px * v.ns_per_px;
  return out;
}

TimeView fit_range(double t0_ns, double t1_ns, double width_px, double margin) {
  const double span = t1_ns > t0_ns ? t1_ns - t0_ns : 0.0;
  return view_of_range(t0_ns - margin * span, t1_ns + margin * span, width_px);
}

}  // namespace shardscope::gui
