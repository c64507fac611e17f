#include "gui/sweep_explorer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include <imgui.h>

#include "gui/colors.h"
#include "gui/time_ruler.h"
#include "gui/window.h"
#include "sim/sweep.h"

namespace shardscope::gui {

namespace {
constexpr Rgb kAxisText = {200, 200, 205};
constexpr Rgb kGrid = {56, 56, 66};

ImVec2 v2(double x, double y) {
  return ImVec2(static_cast<float>(x), static_cast<float>(y));
}

// The policy without its overrides (shown one line each by sim::overrides_labels).
nlohmann::json without_overrides(nlohmann::json policy) {
  if (policy.is_object()) policy.erase("overrides");
  return policy;
}
}  // namespace

SweepAxes sweep_axes(const SweepFile& f, double limit_bytes, const Rect& window) {
  SweepAxes ax;
  ax.area = {window.x + 80, window.y + 24, std::max(window.w - 100, 10.0f),
             std::max(window.h - 64, 10.0f)};
  double xm = 0, ym = 0;
  for (const SweepFilePoint& p : f.points) {
    xm = std::max(xm, static_cast<double>(p.peak_reserved_bytes));
    if (p.fits)
      ym = std::max(ym, p.step_time_ms);
    else
      ax.no_fit_band = std::min(kSweepNoFitBand, ax.area.h * 0.5f);
  }
  // The limit widens the axis only when it is near the points: a model far
  // below an 80 GiB device keeps its points readable (the line then sits at
  // the right edge until dragged in).
  if (limit_bytes <= 1.5 * xm) xm = std::max(xm, limit_bytes);
  ax.x_max = xm > 0 ? xm * 1.08 : 1.0;
  ax.y_max = ym > 0 ? ym * 1.08 : 1.0;
  return ax;
}

void open_sweep_point(AppState& s, size_t index) {
  if (!s.sweep || index >= s.sweep->points.size()) return;
  const SweepFile file = *s.sweep;
  const SweepFilePoint point = file.points[index];
  s.sweep_selected = static_cast<int64_t>(index);
  if (!file.can_simulate()) {
    s.sweep_status =
        "this sweep file is CSV (no model or hardware): write it with "
        "--out FILE.json to simulate configurations here";
    return;
  }
  char what[160];
  std::snprintf(what, sizeof what, "simulating configuration %zu (world %lld)", index,
                static_cast<long long>(point.world));
  s.sweep_status = what;
  s.job_sim = std::make_unique<TraceJob>(what, [file, point, index](std::atomic<int>* stage) {
    SweepPointSimulation sim = simulate_sweep_point(file, point);
    const bool fits = sim.does_not_fit.empty();
    std::shared_ptr<TraceDoc> doc = make_trace_doc(
        std::move(sim.trace),
        "sweep configuration " + std::to_string(index) +
            (fits ? " (simulated)" : " (simulated; does not fit: stops at the failed allocation)"),
        stage);
    doc->does_not_fit = std::move(sim.does_not_fit);
    return doc;
  });
}

void draw_sweep(AppState& s, const ScreenLayout& layout) {
  if (!s.sweep) {
    if (begin_fixed_window("##sweep_missing", layout.statistics, true)) {
      ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "%s", s.sweep_error.c_str());
    }
    ImGui::End();
    return;
  }
  const SweepFile& f = *s.sweep;
  if (s.sweep_limit_bytes <= 0) {
    double xm = 0;
    for (const SweepFilePoint& p : f.points)
      xm = std::max(xm, static_cast<double>(p.peak_reserved_bytes));
    s.sweep_limit_bytes = f.memory_limit_bytes > 0 ? static_cast<double>(f.memory_limit_bytes) : xm;
  }
  if (begin_fixed_window("##sweep_plot", layout.sweep_plot, false)) {
    ImDrawList* dl = ImGui::GetWindowDrawList();
    ImGuiIO& io = ImGui::GetIO();
    const Rect& W = layout.sweep_plot;
    const SweepAxes ax =
        sweep_axes(f, f.memory_limit_bytes > 0 ? static_cast<double>(f.memory_limit_bytes) : 0, W);
    const Rect& A = ax.area;
    dl->AddRectFilled(v2(A.x, A.y), v2(A.x1(), A.y1()), to_imgui(kBackground));
    // Grid and axis labels.
    const double xstep = tick_step_ns(ax.x_max / A.w, 110);
    for (double v = 0; v <= ax.x_max; v += xstep) {
      const float x = ax.x_of(v);
      dl->AddLine(v2(x, A.y), v2(x, A.y1()), to_imgui(kGrid));
      dl->AddText(v2(x - 20, A.y1() + 4), to_imgui(kAxisText), format_bytes(v).c_str());
    }
    const double ystep = tick_step_ns(ax.y_max / (A.h - ax.no_fit_band), 40);
    for (double v = 0; v <= ax.y_max; v += ystep) {
      const float y = ax.y_of(v);
      dl->AddLine(v2(A.x, y), v2(A.x1(), y), to_imgui(kGrid));
      // A label that would cover the no-fit band's is left out.
      if (ax.no_fit_band > 0 && y - 7 < A.y + ax.no_fit_band) continue;
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.4g ms", v);
      dl->AddText(v2(W.x + 4, y - 7), to_imgui(kAxisText), buf);
    }
    // Configurations that do not fit have no step time: a band along the top.
    if (ax.no_fit_band > 0) {
      const float by = A.y + ax.no_fit_band;
      dl->AddLine(v2(A.x, by), v2(A.x1(), by), to_imgui(kAxisText));
      dl->AddText(v2(W.x + 4, ax.no_fit_y() - 7), to_imgui(kAxisText), "no fit");
    }
    dl->AddText(v2(A.x + A.w * 0.5f - 60, A.y1() + 20), to_imgui(kAxisText),
                "peak reserved memory");
    dl->AddText(v2(A.x, W.y + 4), to_imgui(kAxisText), "step time (lower is better)");

    // The memory-limit line, draggable.
    ImGui::SetCursorScreenPos(v2(W.x, W.y));
    ImGui::InvisibleButton("##sweep_area", v2(std::max(W.w, 1.f), std::max(W.h, 1.f)));
    const bool hovered = ImGui::IsItemHovered();
    const float lx = std::min(ax.x_of(s.sweep_limit_bytes), A.x1() - 1);
    if (hovered && ImGui::IsMouseClicked(ImGuiMouseButton_Left) &&
        std::fabs(io.MousePos.x - lx) <= 5)
      s.sweep_dragging_limit = true;
    if (s.sweep_dragging_limit) {
      if (ImGui::IsMouseDown(ImGuiMouseButton_Left))
        s.sweep_limit_bytes = std::clamp(ax.bytes_at(io.MousePos.x), 0.0, ax.x_max);
      else
        s.sweep_dragging_limit = false;
    }

    // The Pareto front joined in memory order, then the points.
    const std::vector<size_t> front = pareto_order(f);
    for (size_t k = 1; k < front.size(); ++k) {
      const SweepFilePoint& p = f.points[front[k - 1]];
      const SweepFilePoint& q = f.points[front[k]];
      dl->AddLine(v2(ax.x_of(static_cast<double>(p.peak_reserved_bytes)), ax.y_of(p.step_time_ms)),
                  v2(ax.x_of(static_cast<double>(q.peak_reserved_bytes)), ax.y_of(q.step_time_ms)),
                  to_imgui(kSweepPareto, 160), 1.5f);
    }
    s.sweep_hover = -1;
    float best_d = 7;
    // Pareto points last, so they are on top.
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < f.points.size(); ++i) {
        const SweepFilePoint& p = f.points[i];
        if (p.pareto != (pass == 1)) continue;
        const float x = ax.x_of(static_cast<double>(p.peak_reserved_bytes));
        const float y = ax.point_y(p);
        const bool fits_limit =
            p.fits && static_cast<double>(p.peak_reserved_bytes) <= s.sweep_limit_bytes;
        const Rgb c = !fits_limit ? kSweepNotFit : (p.pareto ? kSweepPareto : kSweepPoint);
        const float h = p.pareto ? kSweepPointHalf + 1 : kSweepPointHalf;
        dl->AddRectFilled(v2(x - h, y - h), v2(x + h + 1, y + h + 1), to_imgui(c));
        if (static_cast<int64_t>(i) == s.sweep_selected)
          dl->AddRect(v2(x - h - 3, y - h - 3), v2(x + h + 4, y + h + 4), to_imgui(kSelection), 0,
                      0, 2);
        const float d = std::hypot(io.MousePos.x - x, io.MousePos.y - y);
        if (hovered && d < best_d) {
          best_d = d;
          s.sweep_hover = static_cast<int64_t>(i);
        }
      }
    }
    dl->AddRectFilled(v2(lx - 1, A.y), v2(lx + 1, A.y1()), to_imgui(kSweepLimit));
    const std::string lim = "limit " + format_bytes(s.sweep_limit_bytes);
    dl->AddText(v2(lx + 4, A.y + 2), to_imgui(kSweepLimit), lim.c_str());

    if (s.sweep_hover >= 0 && !s.sweep_dragging_limit) {
      const SweepFilePoint& p = f.points[static_cast<size_t>(s.sweep_hover)];
      ImGui::BeginTooltip();
      ImGui::Text("configuration %zu, world %lld%s", p.config, static_cast<long long>(p.world),
                  p.pareto ? "  [pareto]" : "");
      if (p.fits)
        ImGui::Text("step %.3f ms, %.0f tokens/s", p.step_time_ms, p.tokens_per_s);
      else
        ImGui::Text("does not fit: out of memory at '%s' (no step time)", p.oom_buffer.c_str());
      ImGui::Text("peak reserved %s, allocated %s%s",
                  format_bytes(static_cast<double>(p.peak_reserved_bytes)).c_str(),
                  format_bytes(static_cast<double>(p.peak_allocated_bytes)).c_str(),
                  p.fits ? "" : " (up to the failure)");
      // Overrides one line each; the rest of the policy as JSON.
      for (const std::string& line : sim::overrides_labels(p.policy))
        ImGui::Text("override %s", line.c_str());
      ImGui::TextUnformatted(without_overrides(p.policy).dump(2).c_str());
      ImGui::TextDisabled("click: simulate and open its timeline");
      ImGui::EndTooltip();
      if (ImGui::IsMouseReleased(ImGuiMouseButton_Left) &&
          io.MouseDragMaxDistanceSqr[ImGuiMouseButton_Left] < 9.0f)
        open_sweep_point(s, static_cast<size_t>(s.sweep_hover));
    }
  }
  ImGui::End();

  if (begin_fixed_window("##sweep_side", layout.sweep_side, true)) {
    ImGui::TextWrapped("%s", f.path.c_str());
    if (f.from_json) ImGui::Text("model %s on %s", f.model.c_str(), f.hw.c_str());
    size_t fits = 0, pareto = 0;
    for (const SweepFilePoint& p : f.points) {
      fits += p.fits ? 1 : 0;
      pareto += p.pareto ? 1 : 0;
    }
    ImGui::Text("%zu configurations, %zu fit, %zu on the Pareto front", f.points.size(), fits,
                pareto);
    ImGui::Text("memory limit line: %s (drag it)", format_bytes(s.sweep_limit_bytes).c_str());
    if (!s.sweep_status.empty()) ImGui::TextWrapped("%s", s.sweep_status.c_str());
    const int64_t show = s.sweep_selected >= 0 ? s.sweep_selected : f.best;
    if (show >= 0) {
      const SweepFilePoint& p = f.points[static_cast<size_t>(show)];
      ImGui::Separator();
      ImGui::Text("%s configuration %zu", show == f.best ? "best" : "selected", p.config);
      if (p.fits) {
        ImGui::Text("world %lld, step %.3f ms, %.0f tokens/s", static_cast<long long>(p.world),
                    p.step_time_ms, p.tokens_per_s);
        ImGui::Text("exposed comm %.3f ms, overlap %.1f%%", p.exposed_comm_ms, 100 * p.overlap);
      } else {
        ImGui::Text("world %lld, does not fit: out of memory at '%s'",
                    static_cast<long long>(p.world), p.oom_buffer.c_str());
      }
      for (const std::string& line : sim::overrides_labels(p.policy))
        ImGui::TextWrapped("override %s", line.c_str());
      ImGui::TextWrapped("%s", without_overrides(p.policy).dump(1).c_str());
    }
  }
  ImGui::End();
}

}  // namespace shardscope::gui
