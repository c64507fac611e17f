// Memory under the timeline: per rank, allocated (filled) and reserved (line)
// bytes over time on the timeline's time axis, the peak marked; clicking
// chooses a time whose live buffers the side panel lists by category.
#pragma once

#include "gui/app_state.h"
#include "gui/layout.h"

namespace shardscope::gui {

// Plot bands per rank inside the memory window's plot area (x aligned with
// the timeline's lanes): rank slot i gets [y0 + i * h, y0 + (i + 1) * h) with
// h = max(kMinMemoryPlotHeight, area height / ranks), before scrolling.
constexpr float kMinMemoryPlotHeight = 48;
float memory_plot_height(const Rect& plots, size_t ranks);
// The y of `bytes` in a plot band [y0, y1) scaled so that `scale_max` is at
// the top (4 px margin).
float memory_y(float y0, float y1, int64_t bytes, int64_t scale_max);

void draw_memory(AppState& s, const TraceDoc& doc, const Rect& window);

// The live-memory section of the side panel.
void draw_live_memory(AppState& s, const TraceDoc& doc);

}  // namespace shardscope::gui
