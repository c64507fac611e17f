#include "gui/app.h"

#include <cstdio>
#include <string>

#include <imgui.h>

#include "gui/colors.h"
#include "gui/compare_view.h"
#include "gui/memory_view.h"
#include "gui/stats_view.h"
#include "gui/sweep_explorer.h"
#include "gui/time_ruler.h"
#include "gui/timeline_view.h"
#include "gui/window.h"

namespace shardscope::gui {

bool busy(const AppState& s) {
  return s.job_a || s.job_b || s.job_sim;
}

namespace {

const ImVec4 kErrorText(1.0f, 0.42f, 0.42f, 1.0f);

void report_error(AppState& s, const std::string& what) {
  std::fprintf(stderr, "shardscope view: %s\n", what.c_str());
  s.errors.push_back(what);
}

// Takes a finished job's document; reports its error.
std::shared_ptr<TraceDoc> finish(AppState& s, std::unique_ptr<TraceJob>& job) {
  if (!job || !job->done()) return nullptr;
  std::shared_ptr<TraceDoc> doc = job->take();
  job.reset();
  if (!doc->ok()) report_error(s, "cannot load " + doc->label + ": " + doc->error);
  return doc;
}

void reset_timeline(AppState& s) {
  s.timeline = TimelineState{};
  s.memory_pick = MemoryPick{};
  s.memory_scroll = 0;
  s.compare_fitted = false;
}

void poll_jobs(AppState& s) {
  if (auto d = finish(s, s.job_a)) s.a = d;
  if (auto d = finish(s, s.job_b)) s.b = d;
  if (auto d = finish(s, s.job_sim)) {
    if (d->ok()) {
      s.a = d;
      reset_timeline(s);
      s.tab = Tab::timeline;
      s.force_tab = true;
      s.sweep_status = "opened " + d->label;
    } else {
      s.sweep_status = "simulation failed: " + d->error;
    }
  }
}

void apply_script(AppState& s, float w, float h) {
  if (!s.script_pending || busy(s)) return;
  s.script_pending = false;
  const ScreenLayout layout = screen_layout(w, h, s.a && s.a->ok() && s.a->has_memory);
  if (!s.options.zoom.empty()) {
    double t0 = 0, t1 = 0;
    parse_time_range(s.options.zoom, "--zoom", &t0, &t1);
    const float lanes_w = timeline_rects(layout.timeline).lanes.w;
    s.timeline.view = view_of_range(t0, t1, lanes_w);
    s.timeline.fitted = true;
    s.compare_view = view_of_range(t0, t1, timeline_rects(layout.compare_a).lanes.w);
    s.compare_fitted = true;
  }
  if (!s.options.select.empty() && s.a && s.a->ok()) {
    int rank = -1;
    std::string name;
    parse_select(s.options.select, &rank, &name);
    size_t slot = 0;
    uint32_t event = 0;
    if (find_event(*s.a, rank, name, &slot, &event)) {
      s.timeline.has_selection = true;
      s.timeline.sel_rank = slot;
      s.timeline.sel_event = event;
    } else {
      report_error(s, "--select: no event named '" + name + "'" +
                          (rank >= 0 ? " on rank " + std::to_string(rank) : std::string()));
    }
  }
  if (!s.options.memory_time.empty() && s.a && s.a->ok() && !s.a->trace.ranks.empty()) {
    const double t = parse_time_ns(s.options.memory_time, "--mem-time");
    MemoryPick& p = s.memory_pick;
    p.has = true;
    p.rank = s.timeline.has_selection ? s.timeline.sel_rank : 0;
    p.time_ns = s.a->index.origin_ns + static_cast<int64_t>(t);
    p.live = live_memory_at(s.a->trace.ranks[p.rank], p.time_ns);
  }
}

void draw_top_bar(AppState& s, const ScreenLayout& layout) {
  if (begin_fixed_window("##top", layout.top_bar, true)) {
    if (ImGui::BeginTabBar("##tabs")) {
      struct TabDef {
        Tab tab;
        const char* label;
        bool shown;
      };
      const TabDef tabs[] = {{Tab::timeline, "Timeline", true},
                             {Tab::statistics, "Statistics", true},
                             {Tab::compare, "Compare", s.options.traces.size() == 2},
                             {Tab::sweep, "Sweep explorer", !s.options.sweep_file.empty()}};
      for (const TabDef& t : tabs) {
        if (!t.shown) continue;
        const ImGuiTabItemFlags f =
            (s.force_tab && s.tab == t.tab) ? ImGuiTabItemFlags_SetSelected : 0;
        if (ImGui::BeginTabItem(t.label, nullptr, f)) {
          if (!s.force_tab) s.tab = t.tab;
          ImGui::EndTabItem();
        }
      }
      s.force_tab = false;
      ImGui::EndTabBar();
    }
    ImGui::SameLine(360);
    const TraceJob* jobs[] = {s.job_a.get(), s.job_b.get(), s.job_sim.get()};
    bool shown = false;
    for (const TraceJob* j : jobs) {
      if (!j || shown) continue;
      shown = true;
      // Stage-based progress: reading, indexing, metrics.
      const float frac = static_cast<float>(static_cast<int>(j->stage())) / 3.0f;
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s: %s (%.1f s)", j->what().c_str(),
                    job_stage_name(j->stage()), j->seconds());
      ImGui::SetNextItemWidth(200);
      ImGui::ProgressBar(frac, ImVec2(200, 0), job_stage_name(j->stage()));
      ImGui::SameLine();
      ImGui::TextUnformatted(buf);
    }
    if (!shown) {
      if (!s.errors.empty())
        ImGui::TextColored(kErrorText, "%s", s.errors.back().c_str());
      else if (s.a)
        ImGui::TextDisabled("%s%s%s", s.a->label.c_str(), s.b ? "  vs  " : "",
                            s.b ? s.b->label.c_str() : "");
    }
  }
  ImGui::End();
}

// Shown in place of a view when its trace is missing or failed.
bool trace_problem(AppState& s, const std::shared_ptr<TraceDoc>& doc, const char* what) {
  if (doc && doc->ok()) return false;
  if (doc)
    ImGui::TextColored(kErrorText, "cannot load %s:\n%s", doc->label.c_str(), doc->error.c_str());
  else if (busy(s))
    ImGui::TextUnformatted("loading...");
  else
    ImGui::Text("no %s: shardscope view TRACE [TRACE_B] [--sweep FILE]", what);
  return true;
}

void draw_side_panel(AppState& s, const TraceDoc& doc) {
  TimelineState& st = s.timeline;
  if (ImGui::CollapsingHeader("Selected event", ImGuiTreeNodeFlags_DefaultOpen)) {
    if (st.has_selection && st.sel_rank < doc.trace.ranks.size() &&
        st.sel_event < doc.trace.ranks[st.sel_rank].events.size()) {
      event_details(doc, st.sel_rank, st.sel_event, true);
      const traces::RankTrace& r = doc.trace.ranks[st.sel_rank];
      const traces::Event& e = r.events[st.sel_event];
      if (ImGui::SmallButton("live memory at its start")) {
        s.memory_pick.has = true;
        s.memory_pick.rank = st.sel_rank;
        s.memory_pick.time_ns = e.start_ns;
        s.memory_pick.live = live_memory_at(r, e.start_ns);
      }
      // Flows: what it waited on, and what waited on it; click to follow.
      int n = 0;
      for (const traces::Flow& f : r.flows) {
        if (f.to != st.sel_event && f.from != st.sel_event) continue;
        const bool waited_on = f.to == st.sel_event;
        const uint32_t other = waited_on ? f.from : f.to;
        const std::string label = std::string(waited_on ? "waited on: " : "released: ") +
                                  std::string(doc.trace.str(r.events[other].name)) + "##flow" +
                                  std::to_string(n++);
        if (ImGui::Selectable(label.c_str())) st.sel_event = other;
      }
    } else {
      ImGui::TextDisabled("click an event");
    }
  }
  if (doc.has_memory && ImGui::CollapsingHeader("Live memory", ImGuiTreeNodeFlags_DefaultOpen))
    draw_live_memory(s, doc);
  if (ImGui::CollapsingHeader("Metrics", ImGuiTreeNodeFlags_DefaultOpen)) {
    const traces::MetricValues& m = doc.metrics.total;
    if (!doc.does_not_fit.empty()) {
      // A step that ran out of memory predicts no time.
      ImGui::TextWrapped("does not fit: %s", doc.does_not_fit.c_str());
      ImGui::Text("peak allocated %s (up to the failure)",
                  format_bytes(static_cast<double>(m.peak_allocated_bytes)).c_str());
      ImGui::Text("peak reserved  %s (up to the failure)",
                  format_bytes(static_cast<double>(m.peak_reserved_bytes)).c_str());
    } else {
      ImGui::Text("step time      %.3f ms", m.step_time_ms);
      ImGui::Text("compute        %.3f ms", m.compute_ms);
      ImGui::Text("communication  %.3f ms", m.comm_ms);
      ImGui::Text("exposed comm   %.3f ms", m.exposed_comm_ms);
      ImGui::Text("overlap        %.1f%%", 100.0 * m.overlap);
      ImGui::Text("idle           %.3f ms", m.idle_ms);
      ImGui::Text("peak allocated %s",
                  format_bytes(static_cast<double>(m.peak_allocated_bytes)).c_str());
      ImGui::Text("peak reserved  %s",
                  format_bytes(static_cast<double>(m.peak_reserved_bytes)).c_str());
    }
  }
  if (ImGui::CollapsingHeader("Navigation")) {
    ImGui::TextWrapped(
        "wheel: zoom at the cursor; left-drag: pan (and scroll); right-drag: zoom to range; "
        "W/S: zoom; A/D: pan; Ctrl+wheel or wheel over names: scroll; click a rank title: "
        "collapse; click a fold: zoom into it.");
    if (ImGui::Button("fit all")) st.fitted = false;
  }
}

void draw_timeline_tab(AppState& s, const ScreenLayout& layout) {
  const bool ok = s.a && s.a->ok();
  if (begin_fixed_window("##timeline", layout.timeline, !ok)) {
    if (!trace_problem(s, s.a, "trace")) {
      draw_timeline(*s.a, timeline_rects(layout.timeline), s.timeline, 0, true, s.scratch);
    }
  }
  ImGui::End();
  if (ok && s.a->has_memory) {
    if (begin_fixed_window("##memory", layout.memory, false)) draw_memory(s, *s.a, layout.memory);
    ImGui::End();
  }
  if (begin_fixed_window("##side", layout.side, true)) {
    if (ok) draw_side_panel(s, *s.a);
    for (const std::string& e : s.errors) ImGui::TextWrapped("%s", e.c_str());
  }
  ImGui::End();
}

}  // namespace

void app_init(AppState& s, const ViewerOptions& options) {
  s.options = options;
  const std::vector<std::string>& t = options.traces;
  if (t.size() >= 1)
    s.job_a = std::make_unique<TraceJob>("loading " + t[0], [p = t[0]](std::atomic<int>* stage) {
      return load_trace_doc(p, stage);
    });
  if (t.size() >= 2)
    s.job_b = std::make_unique<TraceJob>("loading " + t[1], [p = t[1]](std::atomic<int>* stage) {
      return load_trace_doc(p, stage);
    });
  if (!options.sweep_file.empty()) {
    try {
      s.sweep = load_sweep_file(options.sweep_file);
    } catch (const std::exception& e) {
      s.sweep_error = e.what();
      report_error(s, e.what());
    }
  }
  s.tab = t.size() == 2 ? Tab::compare
                        : (t.empty() && !options.sweep_file.empty() ? Tab::sweep : Tab::timeline);
  if (!options.tab.empty()) s.tab = parse_tab(options.tab);
  s.force_tab = true;
  if (options.open_config >= 0) {
    if (!s.sweep || static_cast<size_t>(options.open_config) >= s.sweep->points.size())
      report_error(s, "--open-config " + std::to_string(options.open_config) +
                          ": no such configuration in the sweep file");
    else
      open_sweep_point(s, static_cast<size_t>(options.open_config));
  }
}

void app_frame(AppState& s, float width, float height) {
  poll_jobs(s);
  apply_script(s, width, height);
  const ScreenLayout layout = screen_layout(width, height, s.a && s.a->ok() && s.a->has_memory);
  draw_top_bar(s, layout);
  switch (s.tab) {
    case Tab::timeline:
      draw_timeline_tab(s, layout);
      break;
    case Tab::statistics:
      if (begin_fixed_window("##statistics", layout.statistics, true)) {
        if (!trace_problem(s, s.a, "trace")) draw_statistics(*s.a);
      }
      ImGui::End();
      break;
    case Tab::compare:
      draw_compare(s, layout);
      break;
    case Tab::sweep:
      draw_sweep(s, layout);
      break;
  }
}

bool app_settled(const AppState& s) {
  return !busy(s) && !s.script_pending;
}

size_t app_errors(const AppState& s) {
  return s.errors.size();
}

}  // namespace shardscope::gui
