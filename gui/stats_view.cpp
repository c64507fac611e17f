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

constexpr const char* kShareColumn = "% of self time";

void breakdown_table(const char* id, const char* key_name,
                     const std::vector<traces::BreakdownRow>& rows, float height) {
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersOuter |
                                ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_Resizable;
  if (!ImGui::BeginTable(id, 6, flags, ImVec2(0, height))) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn(key_name, ImGuiTableColumnFlags_WidthStretch, 3.0f);
  for (const char* c : {"count", "total ms", "mean ms", "self ms", kShareColumn})
    ImGui::TableSetupColumn(c, ImGuiTableColumnFlags_WidthStretch, 1.0f);
  const double summed = summed_self_ms(rows);
  // The header row by hand, for the share column's tooltip.
  ImGui::TableNextRow(ImGuiTableRowFlags_Headers);
  for (int c = 0; c < 6; ++c) {
    if (!ImGui::TableSetColumnIndex(c)) continue;
    ImGui::TableHeader(ImGui::TableGetColumnName(c));
    if (c == 5 && ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "self ms / %.4f ms: the summed self time of every event in the reported steps\n"
          "(all lanes and ranks; concurrent events each count). Rows sum to 100%%.",
          summed);
  }
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
      ImGui::Text("%.1f%%", 100.0 * self_time_share(r, summed));
    }
  }
  ImGui::EndTable();
}

}  // namespace

double summed_self_ms(const std::vector<traces::BreakdownRow>& rows) {
  double sum = 0;
  for (const traces::BreakdownRow& r : rows) sum += r.self_ms;
  return sum;
}

double self_time_share(const traces::BreakdownRow& row, double summed) {
  return summed > 0 ? row.self_ms / summed : 0.0;
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
  ImGui::TextDisabled(
      "breakdowns: events of the reported steps; %s = self ms / %.4f ms, the summed self time "
      "of all of them (every lane and rank)",
      kShareColumn, summed_self_ms(m.by_category));
  ImGui::TextUnformatted("per op type");
  breakdown_table("##by_op", "op", m.by_op, h);
  ImGui::TextUnformatted("per unit");
  breakdown_table("##by_unit", "unit", m.by_unit, h);
  ImGui::TextUnformatted("per category");
  breakdown_table("##by_category", "category", m.by_category, h);
}

}  // namespace shardscope::gui
