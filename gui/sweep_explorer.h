// The sweep explorer: every simulated configuration of a `shardscope sweep
// --out` file as a point of (peak reserved memory, step time); the Pareto
// front (as the sweep flagged it) highlighted and joined; a draggable
// memory-limit line (points right of it drawn as not fitting); hovering shows
// the policy; clicking simulates that configuration (sim/) and opens its
// timeline.
#pragma once

#include "gui/app_state.h"
#include "gui/layout.h"
#include "gui/sweep_file.h"

namespace shardscope::gui {

// Half the side of a point's square, in pixels.
constexpr float kSweepPointHalf = 4;
// Height of the band along the top of the plot that holds the configurations
// that do not fit (they have no step time to be placed by), in pixels.
constexpr float kSweepNoFitBand = 16;

// Axes of the scatter: x = peak reserved bytes in [0, x_max], y = step time
// in ms in [0, y_max], mapped into `area` (the plot rectangle without the
// axis labels) below the no-fit band when there is one.
struct SweepAxes {
  Rect area;
  double x_max = 1;       // bytes
  double y_max = 1;       // ms
  float no_fit_band = 0;  // kSweepNoFitBand (at most area.h / 2) when a point does not fit
  float x_of(double bytes) const { return area.x + static_cast<float>(bytes / x_max) * area.w; }
  float y_of(double ms) const {
    return area.y1() - static_cast<float>(ms / y_max) * (area.h - no_fit_band);
  }
  float no_fit_y() const { return area.y + no_fit_band * 0.5f; }
  // A point's centre: by step time, or in the no-fit band.
  float point_y(const SweepFilePoint& p) const {
    return p.fits ? y_of(p.step_time_ms) : no_fit_y();
  }
  double bytes_at(float x) const { return (x - area.x) / area.w * x_max; }
};
// Margins around `area` inside the plot window: left 80, right 20, top 24,
// bottom 40. x_max covers the points (and the limit when <= 1.5x their max);
// y_max the step times of those that fit.
SweepAxes sweep_axes(const SweepFile& f, double limit_bytes, const Rect& window);

// Starts simulating point `index` of the sweep (as a click does).
void open_sweep_point(AppState& s, size_t index);

void draw_sweep(AppState& s, const ScreenLayout& layout);

}  // namespace shardscope::gui
