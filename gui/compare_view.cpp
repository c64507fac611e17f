#include "gui/compare_view.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <imgui.h>

#include "gui/colors.h"
#include "gui/time_ruler.h"
#include "gui/timeline_view.h"
#include "gui/window.h"
#include "traces/diff.h"

namespace shardscope::gui {

double step_origin(const TraceDoc& doc, int64_t number) {
  int64_t best = std::numeric_limits<int64_t>::max();
  for (const traces::RankTrace& r : doc.trace.ranks)
    for (const traces::Step& st : r.steps)
      if (st.number == number) best = std::min(best, st.start_ns);
  return best == std::numeric_limits<int64_t>::max()
             ? 0.0
             : static_cast<double>(best - doc.index.origin_ns);
}

std::vector<int64_t> common_steps(const TraceDoc& a, const TraceDoc& b) {
  std::vector<int64_t> out;
  for (const traces::StepMetrics& x : a.metrics.steps)
    for (const traces::StepMetrics& y : b.metrics.steps)
      if (x.step == y.step) out.push_back(x.step);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {

void delta_rows(const char* id, const char* key_name, const std::vector<traces::RowDelta>& rows,
                float height) {
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersOuter |
                                ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingStretchProp;
  // Per step and rank (traces::RowDelta), so traces of different step and
  // rank counts compare; n = events per step and rank.
  if (!ImGui::BeginTable(id, 7, flags, ImVec2(0, height))) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn(key_name, ImGuiTableColumnFlags_WidthStretch, 3.0f);
  for (const char* c : {"n A", "n B", "A ms/step", "B ms/step", "delta ms", "relative"})
    ImGui::TableSetupColumn(c, ImGuiTableColumnFlags_WidthStretch, 1.0f);
  ImGui::TableHeadersRow();
  const Rgb hl = kCompareHighlight;
  const ImVec4 hi(hl.r / 255.f, hl.g / 255.f, hl.b / 255.f, 1);
  for (const traces::RowDelta& r : rows) {
    const bool big =
        r.has_relative ? std::fabs(r.relative) >= kCompareHighlightRelative : r.per_step_b_ms != 0;
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    if (big) ImGui::PushStyleColor(ImGuiCol_Text, hi);
    ImGui::TextUnformatted(r.key.c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%.2f", r.count_per_step_a);
    ImGui::TableNextColumn();
    ImGui::Text("%.2f", r.count_per_step_b);
    ImGui::TableNextColumn();
    ImGui::Text("%.4f", r.per_step_a_ms);
    ImGui::TableNextColumn();
    ImGui::Text("%.4f", r.per_step_b_ms);
    ImGui::TableNextColumn();
    ImGui::Text("%+.4f", r.delta_ms);
    ImGui::TableNextColumn();
    if (r.has_relative)
      ImGui::Text("%+.1f%%", 100.0 * r.relative);
    else
      ImGui::TextUnformatted(r.per_step_b_ms == 0 ? "=" : "new");
    if (big) ImGui::PopStyleColor();
  }
  ImGui::EndTable();
}

void metric_deltas(const traces::MetricsDiff& d, float height) {
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersOuter |
                                ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingStretchProp;
  if (!ImGui::BeginTable("##metric_deltas", 5, flags, ImVec2(0, height))) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  for (const char* c : {"metric", "A", "B", "delta", "relative"}) ImGui::TableSetupColumn(c);
  ImGui::TableHeadersRow();
  for (const traces::MetricDelta& m : d.metrics) {
    const bool bytes = m.name.find("bytes") != std::string::npos;
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(m.name.c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(bytes ? format_bytes(m.a).c_str() : std::to_string(m.a).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(bytes ? format_bytes(m.b).c_str() : std::to_string(m.b).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(bytes ? format_bytes(m.delta).c_str() : std::to_string(m.delta).c_str());
    ImGui::TableNextColumn();
    if (m.has_relative)
      ImGui::Text("%+.1f%%", 100.0 * m.relative);
    else
      ImGui::TextUnformatted("-");
  }
  ImGui::EndTable();
}

}  // namespace

void draw_compare(AppState& s, const ScreenLayout& layout) {
  if (!s.a || !s.b || !s.a->ok() || !s.b->ok()) {
    if (begin_fixed_window("##compare_missing", layout.statistics, true)) {
      ImGui::TextUnformatted("compare needs two traces that loaded: shardscope view A B");
      for (const std::string& e : s.errors)
        ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "%s", e.c_str());
    }
    ImGui::End();
    return;
  }
  const TraceDoc& a = *s.a;
  const TraceDoc& b = *s.b;
  const std::vector<int64_t> steps = common_steps(a, b);
  if (!steps.empty() && std::find(steps.begin(), steps.end(), s.compare_step) == steps.end())
    s.compare_step = steps.front();
  const double shift_a = steps.empty() ? 0.0 : step_origin(a, s.compare_step);
  const double shift_b = steps.empty() ? 0.0 : step_origin(b, s.compare_step);
  const TimelineRects ra = timeline_rects(layout.compare_a, true, false);
  if (!s.compare_fitted) {
    const double end = std::max(static_cast<double>(a.index.end_ns) - shift_a,
                                static_cast<double>(b.index.end_ns) - shift_b);
    s.compare_view = fit_range(0, std::max(end, 1.0), ra.lanes.w);
    s.compare_fitted = true;
  }
  const std::pair<const TraceDoc*, double> sides[2] = {{&a, shift_a}, {&b, shift_b}};
  const Rect rects[2] = {layout.compare_a, layout.compare_b};
  TimelineState* states[2] = {&s.compare_a, &s.compare_b};
  const char* names[2] = {"##compare_a", "##compare_b"};
  for (int k = 0; k < 2; ++k) {
    if (begin_fixed_window(names[k], rects[k], false)) {
      TimelineState& st = *states[k];
      st.view = s.compare_view;
      st.fitted = true;
      draw_timeline(*sides[k].first, timeline_rects(rects[k], true, k == 1), st, sides[k].second,
                    true, s.scratch);
      s.compare_view = st.view;
      // The corner left of the ruler names the trace.
      const std::string tag = std::string(k == 0 ? "A " : "B ") + sides[k].first->label;
      ImGui::GetWindowDrawList()->PushClipRect(
          ImVec2(rects[k].x, rects[k].y),
          ImVec2(rects[k].x + kLabelWidth, rects[k].y + kRulerHeight), true);
      ImGui::GetWindowDrawList()->AddText(ImVec2(rects[k].x + 4, rects[k].y + 4),
                                          to_imgui(kCompareHighlight), tag.c_str());
      ImGui::GetWindowDrawList()->PopClipRect();
    }
    ImGui::End();
  }
  if (begin_fixed_window("##compare_table", layout.compare_table, true)) {
    if (!steps.empty()) {
      ImGui::TextUnformatted("time origin: start of step");
      ImGui::SameLine();
      ImGui::SetNextItemWidth(120);
      const std::string cur = std::to_string(s.compare_step);
      if (ImGui::BeginCombo("##step", cur.c_str())) {
        for (int64_t n : steps)
          if (ImGui::Selectable(std::to_string(n).c_str(), n == s.compare_step)) s.compare_step = n;
        ImGui::EndCombo();
      }
      ImGui::SameLine();
    } else {
      ImGui::TextUnformatted("no common steps: both start at their first event");
      ImGui::SameLine();
    }
    ImGui::TextDisabled("A: %s   B: %s", a.label.c_str(), b.label.c_str());
    for (const TraceDoc* doc : {&a, &b})
      if (!doc->does_not_fit.empty())
        ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1),
                           "%s does not fit (%s): its times are of a step stopped at the failed "
                           "allocation and predict nothing",
                           doc == &a ? "A" : "B", doc->does_not_fit.c_str());
    const traces::MetricsDiff d = traces::diff_metrics(a.metrics, b.metrics);
    const float h = ImGui::GetContentRegionAvail().y;
    const float w = ImGui::GetContentRegionAvail().x;
    ImGui::BeginChild("##cmp_metrics", ImVec2(w * 0.42f, h));
    metric_deltas(d, h - 4);
    ImGui::EndChild();
    ImGui::SameLine();
    ImGui::BeginChild("##cmp_units", ImVec2(0, h));
    delta_rows("##unit_deltas", "unit", d.by_unit, h * 0.5f - 4);
    delta_rows("##op_deltas", "op", d.by_op, h * 0.5f - 4);
    ImGui::EndChild();
  }
  ImGui::End();
}

}  // namespace shardscope::gui
