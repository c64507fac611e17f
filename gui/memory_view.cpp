#include "gui/memory_view.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include <imgui.h>

#include "gui/colors.h"
#include "gui/time_ruler.h"

namespace shardscope::gui {

namespace {
ImVec2 v2(double x, double y) {
  return ImVec2(static_cast<float>(x), static_cast<float>(y));
}
constexpr Rgb kLabelText = {220, 220, 225};
}  // namespace

float memory_plot_height(const Rect& plots, size_t ranks) {
  if (ranks == 0) return plots.h;
  return std::max(kMinMemoryPlotHeight, plots.h / static_cast<float>(ranks));
}

float memory_y(float y0, float y1, int64_t bytes, int64_t scale_max) {
  const float top = y0 + 4;
  if (scale_max <= 0) return y1;
  const double f = static_cast<double>(bytes) / static_cast<double>(scale_max);
  return static_cast<float>(y1 - f * (y1 - top));
}

void draw_memory(AppState& s, const TraceDoc& doc, const Rect& window) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGuiIO& io = ImGui::GetIO();
  const TimelineRects rects = timeline_rects(window, false, false);
  const Rect& P = rects.lanes;
  if (P.w < 2 || P.h < 2) return;
  dl->AddRectFilled(v2(P.x, P.y), v2(P.x1(), P.y1()), to_imgui(kBackground));
  dl->AddRectFilled(v2(rects.labels.x, rects.labels.y), v2(rects.labels.x1(), rects.labels.y1()),
                    to_imgui(kRulerBackground));
  const size_t n = doc.trace.ranks.size();
  const float band_h = memory_plot_height(P, n);
  const float max_scroll = std::max(0.0f, band_h * static_cast<float>(n) - P.h);

  ImGui::SetCursorScreenPos(v2(window.x, window.y));
  ImGui::InvisibleButton("##memory_area", v2(std::max(window.w, 1.f), std::max(window.h, 1.f)));
  const bool hovered = ImGui::IsItemHovered();
  if (hovered && io.MouseWheel != 0) s.memory_scroll -= io.MouseWheel * band_h * 0.5f;
  s.memory_scroll = std::clamp(s.memory_scroll, 0.0f, max_scroll);

  TimeView local = s.timeline.view;  // shared time axis with the timeline tab
  const int width = static_cast<int>(P.w);
  std::vector<MemoryColumn> cols;
  bool hover_col = false;
  size_t hover_rank = 0;
  MemoryColumn hover_value;
  dl->PushClipRect(v2(rects.labels.x, P.y), v2(P.x1(), P.y1()), true);
  for (size_t i = 0; i < n; ++i) {
    const float y0 = P.y + static_cast<float>(i) * band_h - s.memory_scroll;
    const float y1 = y0 + band_h - 2;
    if (y1 < P.y || y0 > P.y1()) continue;
    const MemorySeries& ser = doc.memory[i];
    const traces::RankTrace& r = doc.trace.ranks[i];
    char title[96];
    std::snprintf(title, sizeof title, "rank %d", r.rank);
    dl->AddText(v2(rects.labels.x + 4, y0 + 2), to_imgui(kLabelText), title);
    if (ser.empty()) {
      dl->AddText(v2(rects.labels.x + 4, y0 + 16), to_imgui(kLabelText), "no memory records");
      continue;
    }
    const int64_t scale = std::max(ser.peak_reserved, ser.peak_allocated);
    const std::string top = format_bytes(static_cast<double>(scale));
    dl->AddText(v2(rects.labels.x + 4, y0 + 16), to_imgui(kMemoryReserved), top.c_str());
    memory_columns(ser, local, width, doc.index.end_ns, cols);
    // Allocated: one filled column per pixel; reserved: a line on top.
    for (int c = 0; c < width; ++c) {
      const MemoryColumn& col = cols[static_cast<size_t>(c)];
      if (!col.has) continue;
      const float ya = memory_y(y0, y1, col.allocated, scale);
      dl->AddRectFilled(v2(P.x + c, ya), v2(P.x + c + 1, y1), to_imgui(kMemoryAllocated));
      const float yr = memory_y(y0, y1, col.reserved, scale);
      dl->AddRectFilled(v2(P.x + c, yr), v2(P.x + c + 1, yr + 1), to_imgui(kMemoryReserved));
      if (hovered && io.MousePos.y >= y0 && io.MousePos.y < y1 &&
          static_cast<int>(io.MousePos.x - P.x) == c) {
        hover_col = true;
        hover_rank = i;
        hover_value = col;
      }
    }
    // The peak: the first record reaching the highest allocated value.
    const double t_peak = static_cast<double>(ser.time[static_cast<size_t>(ser.peak_index)]);
    const double xp = std::floor(local.x_of(t_peak));
    if (xp >= 0 && xp < P.w) {
      dl->AddRectFilled(v2(P.x + xp, y0), v2(P.x + xp + 1, y1), to_imgui(kMemoryPeak));
      const std::string label = "peak " + format_bytes(static_cast<double>(ser.peak_allocated));
      const float tw = ImGui::CalcTextSize(label.c_str()).x;
      const double lx = xp + 4 + tw < P.w ? xp + 4 : xp - 4 - tw;
      dl->AddText(v2(P.x + lx, y0 + 2), to_imgui(kMemoryPeak), label.c_str());
    }
    if (s.memory_pick.has && s.memory_pick.rank == i) {
      const double xc =
          std::floor(local.x_of(static_cast<double>(s.memory_pick.time_ns - doc.index.origin_ns)));
      if (xc >= 0 && xc < P.w)
        dl->AddRectFilled(v2(P.x + xc, y0), v2(P.x + xc + 1, y1), to_imgui(kMemoryCursor));
    }
  }
  dl->PopClipRect();
  if (hover_col) {
    ImGui::BeginTooltip();
    ImGui::Text("rank %d at %s", doc.trace.ranks[hover_rank].rank,
                format_time(local.t_of(io.MousePos.x - P.x)).c_str());
    ImGui::Text("allocated %s", format_bytes(static_cast<double>(hover_value.allocated)).c_str());
    ImGui::Text("reserved  %s", format_bytes(static_cast<double>(hover_value.reserved)).c_str());
    ImGui::TextDisabled("(highest in this pixel column; click: live buffers)");
    ImGui::EndTooltip();
  }
  if (hovered && ImGui::IsMouseClicked(ImGuiMouseButton_Left) && io.MousePos.x >= P.x) {
    const size_t i = static_cast<size_t>((io.MousePos.y - P.y + s.memory_scroll) / band_h);
    if (i < n) {
      s.memory_pick.has = true;
      s.memory_pick.rank = i;
      s.memory_pick.time_ns =
          doc.index.origin_ns + static_cast<int64_t>(std::llround(local.t_of(io.MousePos.x - P.x)));
      s.memory_pick.live = live_memory_at(doc.trace.ranks[i], s.memory_pick.time_ns);
    }
  }
}

void draw_live_memory(AppState& s, const TraceDoc& doc) {
  MemoryPick& pick = s.memory_pick;
  if (!pick.has || pick.rank >= doc.trace.ranks.size()) {
    ImGui::TextDisabled("click the memory plot (or --mem-time T) to list the live buffers");
    return;
  }
  const LiveMemory& live = pick.live;
  ImGui::Text("rank %d at %s", doc.trace.ranks[pick.rank].rank,
              format_time(static_cast<double>(pick.time_ns - doc.index.origin_ns)).c_str());
  ImGui::Text("allocated %s, reserved %s",
              format_bytes(static_cast<double>(live.allocated)).c_str(),
              format_bytes(static_cast<double>(live.reserved)).c_str());
  ImGui::Separator();
  ImGui::TextUnformatted("live by category (largest first)");
  for (const auto& [cat, bytes] : live.categories) {
    const Rgb c = kMemoryCategoryColors[static_cast<int>(cat)];
    ImGui::TextColored(ImVec4(c.r / 255.f, c.g / 255.f, c.b / 255.f, 1), "  %-16s %12s",
                       traces::memory_category_name(cat),
                       format_bytes(static_cast<double>(bytes)).c_str());
  }
  if (live.categories.empty()) ImGui::TextDisabled("  (nothing live)");
  ImGui::Separator();
  ImGui::Text("largest live blocks (%zu live)", live.live_blocks);
  if (ImGui::BeginTable("##blocks", 3,
                        ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                            ImGuiTableFlags_SizingStretchProp)) {
    ImGui::TableSetupColumn("bytes");
    ImGui::TableSetupColumn("category");
    ImGui::TableSetupColumn("since");
    ImGui::TableHeadersRow();
    for (const LiveBlock& b : live.blocks) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(static_cast<double>(b.bytes)).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(traces::memory_category_name(b.category));
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(
          format_time(static_cast<double>(b.since_ns - doc.index.origin_ns)).c_str());
    }
    ImGui::EndTable();
  }
}

}  // namespace shardscope::gui
