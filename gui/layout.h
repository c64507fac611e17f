// Where things go on screen, as plain functions of the window size and the
// trace index, so that the window code and the screenshot tests agree on
// every rectangle: the windows of each tab, the parts of a timeline (ruler,
// lane labels, lanes), and the vertical bands of ranks and lanes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gui/lod.h"

namespace shardscope::gui {

struct Rect {
  float x = 0, y = 0, w = 0, h = 0;
  float x1() const { return x + w; }
  float y1() const { return y + h; }
  bool contains(float px, float py) const { return px >= x && px < x + w && py >= y && py < y + h; }
};

constexpr float kTopBarHeight = 30;  // tab bar and file names
constexpr float kRulerHeight = 22;   // time ruler strip of a timeline
constexpr float kLabelWidth = 150;   // lane-name column left of the lanes
constexpr float kLegendHeight = 20;  // category legend under a timeline's lanes

// The windows of each tab for a framebuffer of w x h pixels. Every tab has the
// top bar; the rest is tab-specific and fills the framebuffer.
struct ScreenLayout {
  Rect top_bar;
  // Timeline tab: timeline window (left, top), memory window (left, under the
  // timeline, sharing its x extent: plots line up with lanes), side panel
  // (right, full height: details, live memory).
  Rect timeline, memory, side;
  // Statistics tab: one window.
  Rect statistics;
  // Compare tab: trace A's and B's timelines stacked, their metrics below.
  Rect compare_a, compare_b, compare_table;
  // Sweep tab: scatter plot, and the panel of the hovered/clicked point.
  Rect sweep_plot, sweep_side;
};
ScreenLayout screen_layout(float w, float h, bool has_memory);

// Inside a timeline (or memory) window: the ruler on top, labels on the left,
// the lanes (or plots) in the rest, the legend at the bottom.
struct TimelineRects {
  Rect ruler, labels, lanes, legend;
};
TimelineRects timeline_rects(const Rect& window, bool with_ruler = true, bool with_legend = true);

// Vertical layout of a trace's ranks and lanes, y from the top of the lanes
// area before scrolling. A rank is a header row followed (unless collapsed)
// by its lanes in RankIndex order; a lane is rows.size() rows of row_height.
struct LaneMetrics {
  float header_height = 20;
  float row_height = 18;
  float lane_gap = 2;  // between lanes
  float rank_gap = 6;  // after a rank's last lane
};
struct RankBand {
  size_t rank = 0;       // index into TraceIndex::ranks
  float y0 = 0, y1 = 0;  // header row
  bool collapsed = false;
};
struct LaneBand {
  size_t rank = 0;       // index into TraceIndex::ranks
  size_t lane = 0;       // index into RankIndex::lanes
  float y0 = 0, y1 = 0;  // rows: row r spans [y0 + r * row_height, y0 + (r + 1) * row_height)
  uint32_t rows = 1;
};
struct LaneLayout {
  std::vector<RankBand> ranks;
  std::vector<LaneBand> lanes;  // in drawing order, y ascending
  float height = 0;
  float row_height = 18;
};
// `collapsed[i]` for rank i (missing entries: expanded).
LaneLayout layout_lanes(const TraceIndex& index, const std::vector<uint8_t>& collapsed,
                        const LaneMetrics& m = {});

// The lane band and row under `y`; false when none (a header or a gap).
bool hit_lane(const LaneLayout& layout, float y, size_t* band, uint32_t* row);
// The rank header under `y`; false when none.
bool hit_rank_header(const LaneLayout& layout, float y, size_t* rank);
// The item under `x` among items sorted by x0 (as lod_items makes them): the
// one whose [x0 - slack, max(x1, x0 + 1) + slack] holds x, the nearest when
// several; -1 when none.
int hit_item(const std::vector<DrawItem>& items, double x, double slack = 1);

}  // namespace shardscope::gui
