#include "gui/stats_view.h"

#include <string>
#include <vector>

#include <imgui.h>

#include "gui/time_ruler.h"

namespace shardscope::gui {

namespace {

void metric_row(const char* name, const traces::MetricValues& v) {
  ImGui::TableNextRow();
  ImGui::TableNextColumn();
  ImGui::TextUnformatted(name);
  ImGui::TableNextColumn();
  ImGui::Text("%.3f", v.step_time_ms);
  ImGui::TableNextColumn();
  ImGui::Text("%.3f", v.compute_ms);
  ImGui::TableNextColumn();
  ImGui::Text("%.3f", v.comm_ms);
  ImGui::TableNextColumn();
  ImGui::Text("%.3f", v.exposed_comm_ms);
  ImGui::TableNextColumn();
  ImGui::Text("%.1f%%", 100.0 * v.overlap);
  ImGui::TableNextColumn();
  ImGui::Text("%.3f", v.idle_ms);
  ImGui::TableNextColumn();
  ImGui::TextUnformatted(format_bytes(static_cast<double>(v.peak_allocated_bytes)).c_str());
  ImGui::TableNextColumn();
  ImGui::TextUnformatted(format_bytes(static_cast<double>(v.peak_reserved_bytes)).c_str());
}

void breakdown_table(const char* id, const char* key_name, const traces::Metrics& m,
                     const std::vector<traces::BreakdownRow>& rows, float height) {
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersOuter |
                                ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_Resizable;
  if (!ImGui::BeginTable(id, 6, flags, ImVec2(0, height))) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn(key_name, ImGuiTableColumnFlags_WidthStretch, 3.0f);
  for (const char* c : {"count", "total ms", "mean ms", "self ms", "share of step"})
    ImGui::TableSetupColumn(c, ImGuiTableColumnFlags_WidthStretch, 1.0f);
  ImGui::TableHeadersRow();
  ImGuiListClipper clip;
  clip.Begin(static_cast<int>(rows.size()));
  while (clip.Step()) {
    for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
      const traces::BreakdownRow& r = rows[static_cast<size_t>(i)];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(r.key.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_count(static_cast<uint64_t>(r.count)).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%.4f", r.total_ms);
      ImGui::TableNextColumn();
      ImGui::Text("%.4f", r.mean_ms);
      ImGui::TableNextColumn();
      ImGui::Text("%.4f", r.self_ms);
      ImGui::TableNextColumn();
      ImGui::Text("%.1f%%", 100.0 * step_share(m, r));
    }
  }
  ImGui::EndTable();
}

}  // namespace

double step_share(const traces::Metrics& m, const traces::BreakdownRow& row) {
  double windows_ms = 0;
  for (const traces::RankMetrics& r : m.ranks) {
    const int64_t reported = r.steps > 1 ? r.steps - 1 : 1;
    windows_ms += static_cast<double>(reported) * r.step_time_ms;
  }
  return windows_ms > 0 ? row.total_ms / windows_ms : 0.0;
}

void draw_metrics_table(const traces::Metrics& m) {
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersOuter |
                                ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingStretchProp;
  if (!ImGui::BeginTable("##metrics", 9, flags)) return;
  for (const char* c : {"", "step ms", "compute ms", "comm ms", "exposed comm ms", "overlap",
                        "idle ms", "peak allocated", "peak reserved"})
    ImGui::TableSetupColumn(c);
  ImGui::TableHeadersRow();
  metric_row("all", m.total);
  for (const traces::RankMetrics& r : m.ranks) {
    const std::string name = "rank " + std::to_string(r.rank);
    metric_row(name.c_str(), r);
  }
  for (const traces::StepMetrics& st : m.steps) {
    const std::string name =
        "step " + std::to_string(st.step) + (st.reported ? "" : " (not in the median)");
    metric_row(name.c_str(), st);
  }
  ImGui::EndTable();
}

void draw_statistics(const TraceDoc& doc) {
  const traces::Metrics& m = doc.metrics;
  ImGui::Text("%s: %s, world %d, %s events", doc.label.c_str(), traces::source_name(m.source),
              m.world_size, format_count(doc.index.events).c_str());
  if (!doc.does_not_fit.empty()) {
    // The step stopped at the failed allocation: no time to show.
    ImGui::TextWrapped("does not fit: %s", doc.does_not_fit.c_str());
    ImGui::TextWrapped(
        "the step stops at the failed allocation, so no step time, compute, communication, "
        "overlap or breakdown is predicted; peak allocated %s, peak reserved %s up to the "
        "failure",
        format_bytes(static_cast<double>(m.total.peak_allocated_bytes)).c_str(),
        format_bytes(static_cast<double>(m.total.peak_reserved_bytes)).c_str());
    return;
  }
  ImGui::TextDisabled(
      "metrics: traces/ metric code (median over steps 2..S per rank; max/mean over ranks)");
  draw_metrics_table(m);
  ImGui::Spacing();
  const float avail = ImGui::GetContentRegionAvail().y;
  const float h = std::max(80.0f, (avail - 3 * ImGui::GetTextLineHeightWithSpacing()) / 3);
  ImGui::TextUnformatted("per op type");
  breakdown_table("##by_op", "op", m, m.by_op, h);
  ImGui::TextUnformatted("per unit");
  breakdown_table("##by_unit", "unit", m, m.by_unit, h);
  ImGui::TextUnformatted("per category");
  breakdown_table("##by_category", "category", m, m.by_category, h);
}

}  // namespace shardscope::gui
