#include "gui/timeline_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <imgui.h>

#include "gui/colors.h"
#include "gui/time_ruler.h"

namespace shardscope::gui {

namespace {

constexpr Rgb kEventText = {16, 16, 16};
constexpr Rgb kLabelText = {220, 220, 225};

ImVec2 v2(double x, double y) {
  return ImVec2(static_cast<float>(x), static_cast<float>(y));
}

// The display position of a lane of a rank (index into RankIndex::lanes).
size_t display_lane(const RankIndex& r, uint32_t lane) {
  for (size_t i = 0; i < r.lanes.size(); ++i)
    if (r.lanes[i].lane == lane) return i;
  return 0;
}

// The lane band of (rank slot, display lane), or nullptr when collapsed.
const LaneBand* find_band(const LaneLayout& layout, size_t rank, size_t lane) {
  for (const LaneBand& b : layout.lanes)
    if (b.rank == rank && b.lane == lane) return &b;
  return nullptr;
}

// Centre of event `e` of rank slot `rank` on screen: (x at `at_end` or start, y).
bool event_anchor(const TraceDoc& doc, const LaneLayout& layout, const Rect& lanes,
                  const TimeView& local, float scroll, size_t rank, uint32_t event, bool at_end,
                  ImVec2* out) {
  const traces::RankTrace& r = doc.trace.ranks[rank];
  const RankIndex& ri = doc.index.ranks[rank];
  const traces::Event& e = r.events[event];
  const LaneBand* b = find_band(layout, rank, display_lane(ri, e.lane));
  if (!b) return false;
  const double t = static_cast<double>(e.start_ns - doc.index.origin_ns + (at_end ? e.dur_ns : 0));
  out->x = static_cast<float>(lanes.x + local.x_of(t));
  out->y =
      lanes.y + b->y0 - scroll + (static_cast<float>(ri.depth[event]) + 0.5f) * layout.row_height;
  return true;
}

void draw_arrow(ImDrawList* dl, ImVec2 from, ImVec2 to, ImU32 col) {
  const float dx = std::max(20.0f, std::fabs(to.x - from.x) * 0.4f);
  dl->AddBezierCubic(from, ImVec2(from.x + dx, from.y), ImVec2(to.x - dx, to.y), to, col, 2.0f);
  dl->AddTriangleFilled(ImVec2(to.x, to.y), ImVec2(to.x - 7, to.y - 4), ImVec2(to.x - 7, to.y + 4),
                        col);
}

std::string rank_title(const traces::RankTrace& r) {
  std::string s = "rank " + std::to_string(r.rank);
  if (r.represents.size() > 1) s += " (x" + std::to_string(r.represents.size()) + ")";
  return s;
}

}  // namespace

bool find_event(const TraceDoc& doc, int rank, const std::string& name, size_t* rank_slot,
                uint32_t* event) {
  const uint32_t id = doc.trace.strings.find(name);
  if (id == traces::StringTable::kNotFound) return false;
  for (size_t slot = 0; slot < doc.trace.ranks.size(); ++slot) {
    const traces::RankTrace& r = doc.trace.ranks[slot];
    if (rank >= 0 && r.rank != rank) continue;
    bool found = false;
    for (uint32_t i = 0; i < r.events.size(); ++i) {
      if (r.events[i].name != id) continue;
      if (!found || r.events[i].start_ns < r.events[*event].start_ns) *event = i;
      found = true;
    }
    if (found) {
      *rank_slot = slot;
      return true;
    }
  }
  return false;
}

void event_details(const TraceDoc& doc, size_t rank_slot, uint32_t event, bool full) {
  const traces::RankTrace& r = doc.trace.ranks[rank_slot];
  const traces::Event& e = r.events[event];
  const Rgb c = category_color(e.category);
  ImGui::TextColored(ImVec4(c.r / 255.f, c.g / 255.f, c.b / 255.f, 1), "%s",
                     std::string(doc.trace.str(e.name)).c_str());
  ImGui::Text("category  %s", traces::category_name(e.category));
  const std::string unit(doc.trace.str(e.unit));
  const std::string op(doc.trace.str(e.op));
  ImGui::Text("unit      %s", unit.empty() ? "-" : unit.c_str());
  ImGui::Text("op        %s", op.empty() ? "-" : op.c_str());
  ImGui::Text("rank %d, lane %s", r.rank, std::string(doc.trace.str(r.lanes[e.lane].name)).c_str());
  ImGui::Text("start     %s",
              format_time(static_cast<double>(e.start_ns - doc.index.origin_ns)).c_str());
  ImGui::Text("duration  %s", format_time(static_cast<double>(e.dur_ns)).c_str());
  if (e.bytes) {
    ImGui::Text("bytes     %s (%s)", format_bytes(static_cast<double>(e.bytes)).c_str(),
                format_count(e.bytes).c_str());
    if (e.dur_ns > 0)
      ImGui::Text("          %.2f GB/s",
                  static_cast<double>(e.bytes) / static_cast<double>(e.dur_ns));
  }
  if (e.flops) {
    ImGui::Text("FLOPs     %s", format_count(e.flops).c_str());
    if (e.dur_ns > 0)
      ImGui::Text("          %.2f TFLOP/s",
                  static_cast<double>(e.flops) / static_cast<double>(e.dur_ns) / 1e3);
  }
  if (full && e.correlation) ImGui::Text("correlation %u", e.correlation);
}

void draw_timeline(const TraceDoc& doc, const TimelineRects& rects, TimelineState& st,
                   double shift_ns, bool interactive, std::vector<DrawItem>& scratch,
                   TimelineDrawStats* stats) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGuiIO& io = ImGui::GetIO();
  const TraceIndex& idx = doc.index;
  const Rect& L = rects.lanes;
  if (L.w < 2 || L.h < 2) return;
  if (st.collapsed.size() != idx.ranks.size()) st.collapsed.resize(idx.ranks.size(), 0);
  if (!st.fitted) {
    st.view = fit_range(-shift_ns, static_cast<double>(idx.end_ns) - shift_ns, L.w);
    st.fitted = true;
  }
  const LaneLayout layout = layout_lanes(idx, st.collapsed);
  const float max_scroll = std::max(0.0f, layout.height - L.h);

  // ---- input that moves the view (before drawing, so this frame shows it)
  const Rect whole = {rects.labels.x, rects.ruler.y, rects.labels.w + L.w, rects.ruler.h + L.h};
  bool area_hovered = false, area_clicked = false;
  const ImVec2 mouse = io.MousePos;
  if (interactive) {
    ImGui::SetCursorScreenPos(v2(whole.x, whole.y));
    ImGui::InvisibleButton("##timeline_area", v2(std::max(whole.w, 1.f), std::max(whole.h, 1.f)),
                           ImGuiButtonFlags_MouseButtonLeft | ImGuiButtonFlags_MouseButtonRight);
    area_hovered = ImGui::IsItemHovered();
    const double mx = mouse.x - L.x;
    if (area_hovered && io.MouseWheel != 0) {
      if (io.KeyCtrl || mouse.x < L.x)
        st.scroll_y -= io.MouseWheel * 3 * layout.row_height;
      else
        st.view = zoom_at(st.view, mx, std::pow(1.25, io.MouseWheel));
    }
    if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2.0f)) {
      st.view = pan_by(st.view, io.MouseDelta.x);
      st.scroll_y -= io.MouseDelta.y;
    }
    if (area_hovered && ImGui::IsMouseClicked(ImGuiMouseButton_Right)) {
      st.range_selecting = true;
      st.range_t0 = st.view.t_of(mx);
    }
    if (st.range_selecting && ImGui::IsMouseReleased(ImGuiMouseButton_Right)) {
      st.range_selecting = false;
      const double t1 = st.view.t_of(mx);
      if (std::fabs(st.view.x_of(t1) - st.view.x_of(st.range_t0)) > 3)
        st.view = view_of_range(std::min(st.range_t0, t1), std::max(st.range_t0, t1), L.w);
    }
    area_clicked = area_hovered && ImGui::IsMouseReleased(ImGuiMouseButton_Left) &&
                   io.MouseDragMaxDistanceSqr[ImGuiMouseButton_Left] < 9.0f;
    if ((ImGui::IsWindowHovered() || ImGui::IsWindowFocused()) && !io.WantTextInput) {
      // GLFW key codes of letters are their ASCII capitals (the backend's KeysDown index).
      const double dt = std::max(io.DeltaTime, 1e-3f);
      const double cx = (area_hovered && mx >= 0) ? mx : L.w * 0.5;
      if (ImGui::IsKeyDown('W')) st.view = zoom_at(st.view, cx, std::pow(4.0, dt));
      if (ImGui::IsKeyDown('S')) st.view = zoom_at(st.view, cx, std::pow(4.0, -dt));
      if (ImGui::IsKeyDown('A')) st.view = pan_by(st.view, L.w * dt);
      if (ImGui::IsKeyDown('D')) st.view = pan_by(st.view, -L.w * dt);
    }
  }
  st.scroll_y = std::clamp(st.scroll_y, 0.0f, max_scroll);
  TimeView local = st.view;
  local.start_ns += shift_ns;

  // ---- lanes
  dl->AddRectFilled(v2(L.x, L.y), v2(L.x1(), L.y1()), to_imgui(kBackground));
  dl->AddRectFilled(v2(rects.labels.x, rects.labels.y), v2(rects.labels.x1(), rects.labels.y1()),
                    to_imgui(kRulerBackground));
  dl->PushClipRect(v2(L.x, L.y), v2(L.x1(), L.y1()), true);
  const double hover_x = mouse.x - L.x;
  bool hovered = false;
  size_t hover_rank = 0;
  uint32_t hover_event = 0;
  DrawItem hover_item;
  const Track* hover_track = nullptr;
  const ImFont* font = ImGui::GetFont();
  const float font_size = ImGui::GetFontSize();
  for (size_t bi = 0; bi < layout.lanes.size(); ++bi) {
    const LaneBand& band = layout.lanes[bi];
    const float y0 = L.y + band.y0 - st.scroll_y;
    const float y1 = L.y + band.y1 - st.scroll_y;
    if (y1 < L.y || y0 > L.y1()) continue;
    if (bi % 2 == 1) dl->AddRectFilled(v2(L.x, y0), v2(L.x1(), y1), to_imgui(kLaneStripe));
    const traces::RankTrace& r = doc.trace.ranks[band.rank];
    const LaneIndex& li = idx.ranks[band.rank].lanes[band.lane];
    for (uint32_t row = 0; row < li.rows.size(); ++row) {
      const float ry0 = y0 + static_cast<float>(row) * layout.row_height;
      const float ry1 = ry0 + layout.row_height;
      if (ry1 < L.y || ry0 > L.y1()) continue;
      const Track& tr = li.rows[row];
      scratch.clear();
      lod_items(tr, local, L.w, kFoldPixels, scratch);
      if (stats) {
        stats->items += scratch.size();
        ++stats->rows_drawn;
      }
      for (const DrawItem& it : scratch) {
        const double xa = std::clamp(it.x0, -2.0, L.w + 2.0);
        const double xb = std::clamp(std::max(it.x1, it.x0 + 1.0), -2.0, L.w + 2.0);
        const traces::Event& e = r.events[tr.event[it.first]];
        const Rgb c = it.count == 1
                          ? category_color(e.category)
                          : folded_color(category_color(dominant_category(tr, it.first, it.count)));
        dl->AddRectFilled(v2(L.x + xa, ry0 + 1), v2(L.x + xb, ry1 - 1), to_imgui(c));
        if (stats && it.count > 1) ++stats->folded_items;
        if (xb - xa > 24) {
          const ImVec4 clip(static_cast<float>(L.x + xa + 2), ry0, static_cast<float>(L.x + xb - 2),
                            ry1);
          if (it.count == 1) {
            const std::string_view name = doc.trace.str(e.name);
            dl->AddText(font, font_size, v2(L.x + xa + 3, ry0 + 2), to_imgui(kEventText),
                        name.data(), name.data() + name.size(), 0, &clip);
          } else {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%u", it.count);
            dl->AddText(font, font_size, v2(L.x + xa + 3, ry0 + 2), to_imgui(kLabelText), buf,
                        nullptr, 0, &clip);
          }
        }
      }
      if (interactive && area_hovered && mouse.y >= ry0 && mouse.y < ry1 && mouse.x >= L.x) {
        const int h = hit_item(scratch, hover_x, 2);
        if (h >= 0) {
          hovered = true;
          hover_rank = band.rank;
          hover_item = scratch[static_cast<size_t>(h)];
          hover_event = tr.event[hover_item.first];
          hover_track = &tr;
        }
      }
    }
  }
  // Rank headers (in the lanes area) and step markers.
  for (const RankBand& rb : layout.ranks) {
    const float y0 = L.y + rb.y0 - st.scroll_y;
    if (y0 + (rb.y1 - rb.y0) < L.y || y0 > L.y1()) continue;
    dl->AddRectFilled(v2(L.x, y0), v2(L.x1(), L.y + rb.y1 - st.scroll_y), to_imgui(kRankHeader));
    const traces::RankTrace& r = doc.trace.ranks[rb.rank];
    // The rank's extent: its header to its last lane.
    float rank_y1 = L.y + rb.y1 - st.scroll_y;
    for (const LaneBand& b : layout.lanes)
      if (b.rank == rb.rank) rank_y1 = L.y + b.y1 - st.scroll_y;
    for (const traces::Step& s : r.steps) {
      const double x = local.x_of(static_cast<double>(s.start_ns - idx.origin_ns));
      if (x < -1 || x > L.w + 1) continue;
      dl->AddLine(v2(L.x + x, y0), v2(L.x + x, rank_y1), to_imgui(kStepMarker, 110), 1.0f);
      char buf[48];
      std::snprintf(buf, sizeof buf, "step %lld", static_cast<long long>(s.number));
      dl->AddText(v2(L.x + x + 3, y0 + 3), to_imgui(kStepMarker), buf);
    }
  }
  // Selection outline and its flows (what it waited on, what waited on it).
  if (st.has_selection && st.sel_rank < doc.trace.ranks.size() &&
      st.sel_event < doc.trace.ranks[st.sel_rank].events.size()) {
    ImVec2 a, b;
    if (event_anchor(doc, layout, L, local, st.scroll_y, st.sel_rank, st.sel_event, false, &a) &&
        event_anchor(doc, layout, L, local, st.scroll_y, st.sel_rank, st.sel_event, true, &b)) {
      const float h = layout.row_height * 0.5f;
      dl->AddRect(ImVec2(a.x - 1, a.y - h), ImVec2(std::max(b.x, a.x + 1) + 1, a.y + h),
                  to_imgui(kSelection), 0, 0, 2.0f);
    }
    for (const traces::Flow& f : doc.trace.ranks[st.sel_rank].flows) {
      if (f.from != st.sel_event && f.to != st.sel_event) continue;
      ImVec2 p, q;
      if (event_anchor(doc, layout, L, local, st.scroll_y, st.sel_rank, f.from, true, &p) &&
          event_anchor(doc, layout, L, local, st.scroll_y, st.sel_rank, f.to, false, &q))
        draw_arrow(dl, p, q, to_imgui(kFlow));
    }
  }
  if (st.range_selecting) {
    const double xa = st.view.x_of(st.range_t0);
    const double xb = mouse.x - L.x;
    dl->AddRectFilled(v2(L.x + std::min(xa, xb), L.y), v2(L.x + std::max(xa, xb), L.y1()),
                      to_imgui(kRangeSelect, 60));
  }
  dl->PopClipRect();

  // ---- labels column: rank titles (click to collapse) and lane names
  dl->PushClipRect(v2(rects.labels.x, rects.labels.y), v2(rects.labels.x1(), rects.labels.y1()),
                   true);
  for (const RankBand& rb : layout.ranks) {
    const float y0 = rects.labels.y + rb.y0 - st.scroll_y;
    dl->AddRectFilled(v2(rects.labels.x, y0), v2(rects.labels.x1(), y0 + rb.y1 - rb.y0),
                      to_imgui(kRankHeader));
    const std::string title =
        (rb.collapsed ? "[+] " : "[-] ") + rank_title(doc.trace.ranks[rb.rank]);
    dl->AddText(v2(rects.labels.x + 4, y0 + 3), to_imgui(kLabelText), title.c_str());
  }
  for (const LaneBand& b : layout.lanes) {
    const traces::RankTrace& r = doc.trace.ranks[b.rank];
    const LaneIndex& li = idx.ranks[b.rank].lanes[b.lane];
    const std::string_view name = doc.trace.str(r.lanes[li.lane].name);
    const float y0 = rects.labels.y + b.y0 - st.scroll_y;
    dl->AddText(v2(rects.labels.x + 14, y0 + 2), to_imgui(kLabelText), name.data(),
                name.data() + name.size());
  }
  dl->PopClipRect();

  // ---- ruler
  const Rect& R = rects.ruler;
  if (R.h > 0) {
    dl->AddRectFilled(v2(R.x, R.y), v2(R.x1(), R.y1()), to_imgui(kRulerBackground));
    dl->PushClipRect(v2(R.x, R.y), v2(R.x1(), R.y1()), true);
    const double major = tick_step_ns(st.view.ns_per_px, 90);
    for (const Tick& t : ruler_ticks(st.view, R.w)) {
      const double x = R.x + st.view.x_of(t.t_ns);
      dl->AddLine(v2(x, R.y1() - (t.major ? 10 : 4)), v2(x, R.y1()), to_imgui(kRulerTick));
      if (t.major) {
        const std::string label = format_time(t.t_ns, major);
        dl->AddText(v2(x + 3, R.y + 2), to_imgui(kRulerTick), label.c_str());
      }
    }
    dl->PopClipRect();
  }

  // ---- legend: categories present in the trace
  const Rect& G = rects.legend;
  if (G.h > 0) {
    dl->AddRectFilled(v2(G.x, G.y), v2(G.x1(), G.y1()), to_imgui(kRulerBackground));
    float x = G.x + 6;
    for (int c = 0; c < traces::kCategoryCount; ++c) {
      if (!(idx.category_mask & (1u << c))) continue;
      const auto cat = static_cast<traces::Category>(c);
      const char* name = traces::category_name(cat);
      dl->AddRectFilled(v2(x, G.y + 5), v2(x + 10, G.y + 15), to_imgui(category_color(cat)));
      dl->AddText(v2(x + 14, G.y + 3), to_imgui(kLabelText), name);
      x += 24 + ImGui::CalcTextSize(name).x;
    }
  }

  // ---- hover tooltip and clicks
  if (hovered) {
    ImGui::BeginTooltip();
    if (hover_item.count == 1) {
      event_details(doc, hover_rank, hover_event, false);
    } else {
      const double t0 = static_cast<double>(hover_track->start[hover_item.first]);
      const double t1 =
          static_cast<double>(hover_track->end[hover_item.first + hover_item.count - 1]);
      ImGui::Text("%s events folded (narrower than %.0f px)",
                  format_count(hover_item.count).c_str(), kFoldPixels);
      ImGui::Text("from %s to %s", format_time(t0).c_str(), format_time(t1).c_str());
      ImGui::Text("mostly %s (by time)", traces::category_name(dominant_category(
                                             *hover_track, hover_item.first, hover_item.count)));
      ImGui::TextDisabled("click to zoom in");
    }
    ImGui::EndTooltip();
  }
  if (area_clicked) {
    size_t header_rank = 0;
    if (mouse.y >= L.y && hit_rank_header(layout, mouse.y - L.y + st.scroll_y, &header_rank)) {
      st.collapsed[header_rank] ^= 1;
    } else if (hovered && hover_item.count == 1) {
      st.has_selection = true;
      st.sel_rank = hover_rank;
      st.sel_event = hover_event;
    } else if (hovered) {
      const double t0 = static_cast<double>(hover_track->start[hover_item.first]) - shift_ns;
      const double t1 =
          static_cast<double>(hover_track->end[hover_item.first + hover_item.count - 1]) - shift_ns;
      st.view = fit_range(t0, t1, L.w, 0.05);
    } else if (mouse.x >= L.x && mouse.y >= L.y) {
      st.has_selection = false;
    }
  }
}

}  // namespace shardscope::gui
