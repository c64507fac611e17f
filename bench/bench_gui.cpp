// Timeline level of detail at 10 million events: the CPU time to build one
// frame's ImGui draw lists (NewFrame, the timeline widget, Render: no GPU, no
// window; an ImGui context with a built font atlas) at full zoom-out, a mid
// zoom and a deep zoom. Figures are recorded in docs/gui.md.
//
//   bench_gui [EVENTS] [RANKS] [FRAMES]   (default 10000000 4 30)
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <imgui.h>

#include "gui/app_state.h"
#include "gui/layout.h"
#include "gui/timeline_view.h"
#include "gui/trace_doc.h"
#include "gui/window.h"

namespace gui = shardscope::gui;
namespace tr = shardscope::traces;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// `events` spread over `ranks` x 5 lanes (compute, all_gather,
// reduce_scatter, all_reduce, h2d copy): kernels of 0.2-40 us with small
// gaps, collectives longer and sparser, the pattern of an FSDP step repeated.
tr::Trace synthetic(size_t events, int ranks) {
  tr::Trace t;
  t.meta.source = tr::Source::simulator;
  const tr::Category cats[5] = {tr::Category::compute, tr::Category::comm_all_gather,
                                tr::Category::comm_reduce_scatter, tr::Category::comm_all_reduce,
                                tr::Category::memcpy_h2d};
  const char* lanes[5] = {"compute", "all_gather", "reduce_scatter", "all_reduce", "h2d"};
  const tr::LaneKind kinds[5] = {tr::LaneKind::compute, tr::LaneKind::comm, tr::LaneKind::comm,
                                 tr::LaneKind::comm, tr::LaneKind::copy};
  std::vector<uint32_t> names;
  for (int i = 0; i < 64; ++i) names.push_back(t.intern("op " + std::to_string(i)));
  const size_t per_lane = events / static_cast<size_t>(ranks * 5);
  std::mt19937_64 rng(42);
  for (int r = 0; r < ranks; ++r) {
    tr::RankTrace& rt = t.add_rank(r);
    rt.events.reserve(per_lane * 5);
    for (int l = 0; l < 5; ++l) {
      const uint32_t lane = t.add_lane(rt, lanes[l], kinds[l]);
      int64_t time = 0;
      for (size_t i = 0; i < per_lane; ++i) {
        const int64_t dur = l == 0 ? 200 + static_cast<int64_t>(rng() % 40000)
                                   : 2000 + static_cast<int64_t>(rng() % 80000);
        const int64_t gap =
            l == 0 ? static_cast<int64_t>(rng() % 500) : static_cast<int64_t>(rng() % 20000);
        time += gap;
        tr::add_event(rt, lane, names[rng() % names.size()], cats[l], time, dur);
        time += dur;
      }
    }
    for (int64_t s = 0; s < 100; ++s) rt.steps.push_back({s, s * 100000000, s * 100000000});
  }
  return t;
}

// CPU time of this thread (the machine may be shared: wall time would count
// other processes).
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

struct Figures {
  double mean_ms = 0, max_ms = 0;
  gui::TimelineDrawStats stats;
  int vertices = 0;
};

Figures measure(const gui::TraceDoc& doc, gui::TimelineState& st, int frames, float w, float h) {
  const gui::ScreenLayout layout = gui::screen_layout(w, h, false);
  std::vector<gui::DrawItem> scratch;
  Figures f;
  for (int i = 0; i < frames; ++i) {
    const double t0 = thread_cpu_ms();
    ImGui::NewFrame();
    gui::TimelineDrawStats stats;
    if (gui::begin_fixed_window("##timeline", layout.timeline, false))
      gui::draw_timeline(doc, gui::timeline_rects(layout.timeline), st, 0, false, scratch, &stats);
    ImGui::End();
    ImGui::Render();
    const double ms = thread_cpu_ms() - t0;
    f.mean_ms += ms / frames;
    f.max_ms = std::max(f.max_ms, ms);
    f.stats = stats;
    f.vertices = ImGui::GetDrawData()->TotalVtxCount;
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t events = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10000000;
  const int ranks = argc > 2 ? std::atoi(argv[2]) : 4;
  const int frames = argc > 3 ? std::atoi(argv[3]) : 30;
  if (events == 0 || ranks < 1 || frames < 1) {
    std::fprintf(stderr, "usage: bench_gui [EVENTS] [RANKS] [FRAMES]\n");
    return 2;
  }
  auto t0 = Clock::now();
  gui::TraceDoc doc;
  doc.label = "synthetic";
  doc.trace = synthetic(events, ranks);
  const double gen_ms = ms_since(t0);
  t0 = Clock::now();
  doc.index = gui::build_index(doc.trace);
  const double index_ms = ms_since(t0);
  std::printf("trace: %zu events, %d ranks x 5 lanes, span %.3f s (generated in %.0f ms)\n",
              doc.trace.event_count(), ranks, static_cast<double>(doc.index.end_ns) * 1e-9, gen_ms);
  std::printf("index build (sort + rows): %.0f ms\n", index_ms);

  const float w = 1600, h = 1000;
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;
  io.DisplaySize = ImVec2(w, h);
  io.DeltaTime = 1.0f / 60;
  io.BackendFlags |= ImGuiBackendFlags_RendererHasVtxOffset;  // as the OpenGL3 backend
  unsigned char* pixels = nullptr;
  int tw = 0, th = 0;
  io.Fonts->GetTexDataAsRGBA32(&pixels, &tw, &th);  // builds the atlas

  const gui::TimelineRects rects = gui::timeline_rects(gui::screen_layout(w, h, false).timeline);
  const double span = static_cast<double>(doc.index.end_ns);
  struct Zoom {
    const char* name;
    double t0, t1;
  } zooms[] = {{"full zoom-out", 0, span},
               {"1/100 of the span (260 ms)", span * 0.5, span * 0.51},
               {"mid zoom (2.6 ms, folds + events)", span * 0.5, span * 0.5 + span * 1e-4},
               {"deep zoom (200 us)", span * 0.5, span * 0.5 + 200000}};
  std::printf(
      "frame CPU time = NewFrame + timeline widget + Render, %.0fx%.0f, lanes %.0f px wide, %d "
      "frames\n",
      w, h, rects.lanes.w, frames);
  for (const Zoom& z : zooms) {
    gui::TimelineState st;
    st.view = gui::view_of_range(z.t0, z.t1, rects.lanes.w);
    st.fitted = true;
    measure(doc, st, 3, w, h);  // warm-up
    const Figures f = measure(doc, st, frames, w, h);
    std::printf(
        "  %-30s %7.3f ms mean, %7.3f ms max; %zu rows, %zu items (%zu folds), %d vertices\n",
        z.name, f.mean_ms, f.max_ms, f.stats.rows_drawn, f.stats.items, f.stats.folded_items,
        f.vertices);
  }
  ImGui::DestroyContext();
  return 0;
}
