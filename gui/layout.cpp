#include "gui/layout.h"

#include <algorithm>
#include <cmath>

namespace shardscope::gui {

ScreenLayout screen_layout(float w, float h, bool has_memory) {
  ScreenLayout s;
  s.top_bar = {0, 0, w, kTopBarHeight};
  const float body_y = kTopBarHeight;
  const float body_h = std::max(h - kTopBarHeight, 1.0f);
  const float side_w = std::floor(std::clamp(w * 0.26f, 260.0f, 480.0f));
  const float left_w = std::max(w - side_w, 1.0f);
  const float timeline_h = has_memory ? std::floor(body_h * 0.68f) : body_h;
  s.timeline = {0, body_y, left_w, timeline_h};
  s.memory = {0, body_y + timeline_h, left_w, body_h - timeline_h};
  s.side = {left_w, body_y, w - left_w, body_h};
  s.statistics = {0, body_y, w, body_h};
  const float cmp_h = std::floor(body_h * 0.36f);
  s.compare_a = {0, body_y, w, cmp_h};
  s.compare_b = {0, body_y + cmp_h, w, cmp_h};
  s.compare_table = {0, body_y + 2 * cmp_h, w, body_h - 2 * cmp_h};
  s.sweep_plot = {0, body_y, left_w, body_h};
  s.sweep_side = {left_w, body_y, w - left_w, body_h};
  return s;
}

TimelineRects timeline_rects(const Rect& win, bool with_ruler, bool with_legend) {
  TimelineRects r;
  const float ruler_h = with_ruler ? kRulerHeight : 0;
  const float legend_h = with_legend ? kLegendHeight : 0;
  const float body_h = std::max(win.h - ruler_h - legend_h, 0.0f);
  const float label_w = std::min(kLabelWidth, win.w);
  r.ruler = {win.x + label_w, win.y, win.w - label_w, ruler_h};
  r.labels = {win.x, win.y + ruler_h, label_w, body_h};
  r.lanes = {win.x + label_w, win.y + ruler_h, win.w - label_w, body_h};
  r.legend = {win.x, win.y + ruler_h + body_h, win.w, legend_h};
  return r;
}

LaneLayout layout_lanes(const TraceIndex& index, const std::vector<uint8_t>& collapsed,
                        const LaneMetrics& m) {
  LaneLayout out;
  out.row_height = m.row_height;
  float y = 0;
  for (size_t ri = 0; ri < index.ranks.size(); ++ri) {
    RankBand rb;
    rb.rank = ri;
    rb.collapsed = ri < collapsed.size() && collapsed[ri] != 0;
    rb.y0 = y;
    rb.y1 = y + m.header_height;
    y = rb.y1;
    out.ranks.push_back(rb);
    if (!rb.collapsed) {
      const RankIndex& r = index.ranks[ri];
      for (size_t li = 0; li < r.lanes.size(); ++li) {
        LaneBand lb;
        lb.rank = ri;
        lb.lane = li;
        lb.rows = static_cast<uint32_t>(std::max<size_t>(r.lanes[li].rows.size(), 1));
        lb.y0 = y;
        lb.y1 = y + static_cast<float>(lb.rows) * m.row_height;
        y = lb.y1 + m.lane_gap;
        out.lanes.push_back(lb);
      }
    }
    y += m.rank_gap;
  }
  out.height = y;
  return out;
}

bool hit_lane(const LaneLayout& layout, float y, size_t* band, uint32_t* row) {
  // Bands are in y order: binary search the last band starting at or above y.
  const auto it = std::upper_bound(layout.lanes.begin(), layout.lanes.end(), y,
                                   [](float v, const LaneBand& b) { return v < b.y0; });
  if (it == layout.lanes.begin()) return false;
  const LaneBand& b = *(it - 1);
  if (y >= b.y1) return false;
  *band = static_cast<size_t>(it - 1 - layout.lanes.begin());
  *row = std::min(b.rows - 1, static_cast<uint32_t>((y - b.y0) / layout.row_height));
  return true;
}

bool hit_rank_header(const LaneLayout& layout, float y, size_t* rank) {
  for (const RankBand& r : layout.ranks)
    if (y >= r.y0 && y < r.y1) {
      *rank = r.rank;
      return true;
    }
  return false;
}

int hit_item(const std::vector<DrawItem>& items, double x, double slack) {
  // Items are sorted by x0 and do not overlap (within a track): look at the
  // last item starting left of x + slack and its neighbour.
  const auto it = std::upper_bound(items.begin(), items.end(), x + slack,
                                   [](double v, const DrawItem& d) { return v < d.x0; });
  int best = -1;
  double best_dist = 1e300;
  for (auto c = it; c != items.begin() && it - c < 3;) {
    --c;
    const double x1 = std::max(c->x1, c->x0 + 1);
    if (x < c->x0 - slack || x > x1 + slack) continue;
    const double dist = x < c->x0 ? c->x0 - x : (x > x1 ? x - x1 : 0);
    if (dist < best_dist) {
      best_dist = dist;
      best = static_cast<int>(c - items.begin());
    }
  }
  return best;
}

}  // namespace shardscope::gui
