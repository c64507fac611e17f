// Screenshots of the real viewer under xvfb-run (Mesa's software OpenGL):
// solid rectangles come out in their exact colors, so the tests look for the
// named colors of gui/colors.h at the places gui/layout.h says they go.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <stb/stb_image.h>
#include <catch2/catch.hpp>

#include "gui/colors.h"
#include "gui/layout.h"
#include "gui/lod.h"
#include "gui/memory_view.h"
#include "gui/sweep_explorer.h"
#include "gui/time_view.h"
#include "tests/cli/run_cli.h"
#include "tests/temp_dir.h"
#include "traces/trace_io.h"

namespace gui = shardscope::gui;
namespace tr = shardscope::traces;

namespace {

constexpr int kW = 1200, kH = 800;
constexpr int64_t MiB = 1 << 20;

struct Image {
  int w = 0, h = 0;
  std::vector<uint8_t> rgb;
  gui::Rgb at(int x, int y) const {
    const size_t i = (static_cast<size_t>(y) * static_cast<size_t>(w) + static_cast<size_t>(x)) * 3;
    return {rgb[i], rgb[i + 1], rgb[i + 2]};
  }
  // Pixels of color c in [x0, x1) x [y0, y1).
  int count(gui::Rgb c, int x0, int y0, int x1, int y1) const {
    int n = 0;
    for (int y = std::max(y0, 0); y < std::min(y1, h); ++y)
      for (int x = std::max(x0, 0); x < std::min(x1, w); ++x) n += at(x, y) == c ? 1 : 0;
    return n;
  }
};

Image read_png(const std::string& path) {
  Image img;
  int channels = 0;
  unsigned char* data = stbi_load(path.c_str(), &img.w, &img.h, &channels, 3);
  REQUIRE(data != nullptr);
  img.rgb.assign(data, data + static_cast<size_t>(img.w) * static_cast<size_t>(img.h) * 3);
  stbi_image_free(data);
  return img;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `shardscope view ARGS --screenshot PNG --size 1200x800` under xvfb-run;
// returns the exit status; stderr goes to `err`. LeakSanitizer is off for the
// windowed runs (ASan build): Mesa's dlopen'ed GL driver leaks at exit and
// makes LSan fail; the viewer's own logic is leak-checked in test_gui_logic.
// `as_user`: as nobody when the suite runs as root (outputs to device files).
int view(const std::string& args, const std::string& png, const std::string& err,
         bool as_user = false) {
  const std::string user_cli = shardscope::test::cli_as_user();
  const size_t split = user_cli.rfind(' ');  // "setpriv ... COPY" or the binary itself
  const std::string user =
      as_user && split != std::string::npos ? user_cli.substr(0, split + 1) : "";
  const std::string bin = as_user ? user_cli.substr(split == std::string::npos ? 0 : split + 1)
                                  : std::string(SHARDSCOPE_CLI);
  const std::string cmd = "ASAN_OPTIONS=detect_leaks=0 " + user +
                          "xvfb-run -a -s \"-screen 0 1600x1000x24\" " + bin + " view " + args +
                          " --screenshot " + png + " --size " + std::to_string(kW) + "x" +
                          std::to_string(kH) + " 2>" + err;
  // xvfb-run itself exits 5 when it fails to remove its temporary directory
  // after the program ran (seen once in CI under load): that says nothing
  // about the viewer, so the run is repeated (at most twice more).
  for (int attempt = 0;; ++attempt) {
    const int status = std::system(cmd.c_str());
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == 5 && attempt < 2 && slurp(err).find("xvfb-run: error") != std::string::npos)
      continue;
    return code;
  }
}

// One rank, one lane per stream, each stream one category, over [0, 10 us):
//   compute        compute      [1000, 3000) [5000, 7000)
//   all_gather     all_gather   [0, 2000)
//   reduce_scatter reduce_scat. [6000, 8000)
//   all_reduce     all_reduce   [8000, 9500)
//   h2d            memcpy.h2d   [2000, 4000)
// and memory: +1 MiB at 500, +4 MiB at 2500 (the peak, 5 MiB), -4 MiB at
// 4000, +2 MiB at 7000, -2 MiB at 9000; one step [0, 10000).
// `stretch` scales every time (B of the compare test).
tr::Trace hand_made(double stretch = 1.0) {
  tr::Trace t;
  t.meta.source = tr::Source::simulator;
  tr::RankTrace& r = t.add_rank(0);
  const auto T = [&](int64_t ns) { return static_cast<int64_t>(std::llround(ns * stretch)); };
  struct Lane {
    const char* name;
    tr::LaneKind kind;
    tr::Category cat;
    std::vector<std::pair<int64_t, int64_t>> spans;
  };
  const std::vector<Lane> lanes = {
      {"compute", tr::LaneKind::compute, tr::Category::compute, {{1000, 3000}, {5000, 7000}}},
      {"all_gather", tr::LaneKind::comm, tr::Category::comm_all_gather, {{0, 2000}}},
      {"reduce_scatter", tr::LaneKind::comm, tr::Category::comm_reduce_scatter, {{6000, 8000}}},
      {"all_reduce", tr::LaneKind::comm, tr::Category::comm_all_reduce, {{8000, 9500}}},
      {"h2d", tr::LaneKind::copy, tr::Category::memcpy_h2d, {{2000, 4000}}}};
  for (const Lane& l : lanes) {
    const uint32_t lane = t.add_lane(r, l.name, l.kind);
    for (const auto& [a, b] : l.spans) {
      tr::Event& e =
          tr::add_event(r, lane, t.intern(std::string(l.name) + " op"), l.cat, T(a), T(b) - T(a));
      e.unit = t.intern("h.0");
      e.bytes = 1 << 20;
    }
  }
  r.steps.push_back({1, 0, T(10000)});
  tr::add_allocation(r, T(500), 1 * MiB, 0x1000, 0, tr::MemoryCategory::parameters, 8 * MiB);
  tr::add_allocation(r, T(2500), 4 * MiB, 0x2000, 0, tr::MemoryCategory::activations, 8 * MiB);
  tr::add_allocation(r, T(4000), -4 * MiB, 0x2000, 0, tr::MemoryCategory::activations, 8 * MiB);
  tr::add_allocation(r, T(7000), 2 * MiB, 0x3000, 0, tr::MemoryCategory::gradients, 8 * MiB);
  tr::add_allocation(r, T(9000), -2 * MiB, 0x3000, 0, tr::MemoryCategory::gradients, 8 * MiB);
  return t;
}

// Checks that every event of `t` is drawn in its category color in its lane's
// band of the timeline drawn into `window`, and that no category color
// appears outside its lanes. The view shows [0, span_ns]; `legend`: the
// window has the category legend under its lanes.
void check_lanes(const Image& img, const tr::Trace& t, const gui::Rect& window, double span_ns,
                 bool legend) {
  const gui::TimelineRects rects = gui::timeline_rects(window, true, legend);
  const gui::TraceIndex idx = gui::build_index(t);
  const gui::LaneLayout layout = gui::layout_lanes(idx, {});
  const gui::TimeView v = gui::view_of_range(0, span_ns, rects.lanes.w);
  const tr::RankTrace& r = t.ranks[0];
  for (const gui::LaneBand& b : layout.lanes) {
    const gui::LaneIndex& li = idx.ranks[0].lanes[b.lane];
    const int y_top = static_cast<int>(rects.lanes.y + b.y0);  // integer by construction
    const int y_bot = static_cast<int>(rects.lanes.y + b.y1);
    for (uint32_t ev : li.rows[0].event) {
      const tr::Event& e = r.events[ev];
      const gui::Rgb c = gui::category_color(e.category);
      const int x0 =
          static_cast<int>(std::ceil(rects.lanes.x + v.x_of(static_cast<double>(e.start_ns)))) + 1;
      const int x1 = static_cast<int>(std::floor(
                         rects.lanes.x + v.x_of(static_cast<double>(e.start_ns + e.dur_ns)))) -
                     2;
      INFO("lane " << t.str(r.lanes[li.lane].name) << " event " << t.str(e.name));
      REQUIRE(x1 - x0 > 20);
      // The first pixel row of the rectangle (above the label text) is solid.
      CHECK(img.count(c, x0, y_top + 1, x1, y_top + 2) == x1 - x0);
      // And nothing of that color above or below the band, in the lanes area.
      CHECK(img.count(c, x0, static_cast<int>(rects.lanes.y), x1, y_top) == 0);
      CHECK(img.count(c, x0, y_bot, x1, static_cast<int>(rects.lanes.y1())) == 0);
      // Nor before the first event of its row.
      if (ev == li.rows[0].event.front())
        CHECK(img.count(c, static_cast<int>(rects.lanes.x), y_top, x0 - 4, y_bot) == 0);
    }
  }
}

}  // namespace

TEST_CASE(
    "screenshot: each category's color fills its lane rows, the memory peak is at the trace's "
    "peak") {
  shardscope::test::TempDir dir("gui_shot");
  const std::string trace = (dir.path / "t.bin").string();
  const tr::Trace t = hand_made();
  tr::save_trace(t, trace);
  const std::string png = (dir.path / "timeline.png").string();
  const std::string err = (dir.path / "err.txt").string();
  REQUIRE(view(trace + " --zoom 0:10us --mem-time 3us", png, err) == 0);
  const Image img = read_png(png);
  REQUIRE(img.w == kW);
  REQUIRE(img.h == kH);
  const gui::ScreenLayout s = gui::screen_layout(kW, kH, true);
  check_lanes(img, t, s.timeline, 10000, true);

  // Memory: the peak marker's column is the column of t = 2500 ns (the first
  // record reaching 5 MiB); the allocated fill right of it reaches 5/8 of the
  // plot, left of it (1 MiB) only 1/8.
  const gui::TimelineRects m = gui::timeline_rects(s.memory, false, false);
  const gui::TimeView v = gui::view_of_range(0, 10000, m.lanes.w);
  const int xp = static_cast<int>(m.lanes.x + std::floor(v.x_of(2500)));
  const float band_h = gui::memory_plot_height(m.lanes, 1);
  const int y0 = static_cast<int>(m.lanes.y), y1 = static_cast<int>(m.lanes.y + band_h - 2);
  // Below the "peak" label: the marker column is the only peak-colored one.
  int peak_cols = 0, found_x = -1;
  for (int x = static_cast<int>(m.lanes.x); x < static_cast<int>(m.lanes.x1()); ++x)
    if (img.count(gui::kMemoryPeak, x, y0 + 20, x + 1, y1) > 0) {
      ++peak_cols;
      found_x = x;
    }
  CHECK(peak_cols == 1);
  CHECK(found_x == xp);
  const float y_peak =
      gui::memory_y(static_cast<float>(y0), static_cast<float>(y1), 5 * MiB, 8 * MiB);
  const float y_one =
      gui::memory_y(static_cast<float>(y0), static_cast<float>(y1), 1 * MiB, 8 * MiB);
  CHECK(img.at(xp + 3, static_cast<int>(y_peak) + 2) == gui::kMemoryAllocated);
  CHECK_FALSE(img.at(xp - 30, static_cast<int>(y_peak) + 2) == gui::kMemoryAllocated);
  CHECK(img.at(xp - 30, static_cast<int>(y_one) + 2) == gui::kMemoryAllocated);
  // The chosen time (--mem-time 3us) is marked.
  CHECK(img.count(gui::kMemoryCursor, static_cast<int>(m.lanes.x + std::floor(v.x_of(3000))),
                  y0 + 20, static_cast<int>(m.lanes.x + std::floor(v.x_of(3000))) + 1, y1) > 0);
}

TEST_CASE("screenshot: compare draws both traces stacked on one time axis") {
  shardscope::test::TempDir dir("gui_cmp");
  const std::string a = (dir.path / "a.bin").string();
  const std::string b = (dir.path / "b.json").string();
  const tr::Trace ta = hand_made(1.0);
  const tr::Trace tb = hand_made(1.5);  // "predicted" 1.5x slower
  tr::save_trace(ta, a);
  tr::save_trace(tb, b);
  const std::string png = (dir.path / "cmp.png").string();
  const std::string err = (dir.path / "err.txt").string();
  REQUIRE(view(a + " " + b + " --tab compare --zoom 0:15us", png, err) == 0);
  const Image img = read_png(png);
  const gui::ScreenLayout s = gui::screen_layout(kW, kH, true);
  check_lanes(img, ta, s.compare_a, 15000, false);
  check_lanes(img, tb, s.compare_b, 15000, true);
}

TEST_CASE("screenshot: a sweep file shows its points, the Pareto front and the memory limit") {
  shardscope::test::TempDir dir("gui_sweep");
  nlohmann::json configs = nlohmann::json::array();
  // (step ms, peak reserved GiB, fits, pareto)
  const std::vector<std::tuple<double, int64_t, bool, bool>> pts = {{4.0, 10, true, true},
                                                                    {2.0, 30, true, true},
                                                                    {5.0, 40, true, false},
                                                                    {1.5, 90, false, false}};
  for (const auto& [ms, gib, fits, pareto] : pts) {
    // As sweep writes them: no times for a configuration that does not fit.
    auto time = [fits = fits](double v) { return fits ? nlohmann::json(v) : nlohmann::json(); };
    configs.push_back({{"world", 8},
                       {"policy", {{"reshard_after_forward", pareto}}},
                       {"fits", fits},
                       {"pareto", pareto},
                       {"tokens_per_step", 8192},
                       {"tokens_per_s", time(8192 / ms * 1e3)},
                       {"metrics",
                        {{"step_time_ms", time(ms)},
                         {"peak_allocated_bytes", gib << 29},
                         {"peak_reserved_bytes", gib << 30},
                         {"compute_ms", time(1)},
                         {"comm_ms", time(1)},
                         {"exposed_comm_ms", time(0.5)},
                         {"overlap", time(0.5)},
                         {"idle_ms", time(0)}}}});
  }
  const std::string sweep = dir.write("sweep.json", {{"model", "gpt2-tiny"},
                                                     {"hw", "h100-sxm"},
                                                     {"worlds", {8}},
                                                     {"memory_limit_bytes", int64_t{80} << 30},
                                                     {"configs", configs},
                                                     {"rejected", 0},
                                                     {"best", 1}});
  const std::string png = (dir.path / "sweep.png").string();
  const std::string err = (dir.path / "err.txt").string();
  REQUIRE(view("--sweep " + sweep, png, err) == 0);
  const Image img = read_png(png);
  const gui::ScreenLayout s = gui::screen_layout(kW, kH, false);
  const gui::SweepFile f = gui::load_sweep_file(sweep);
  const gui::SweepAxes ax =
      gui::sweep_axes(f, static_cast<double>(f.memory_limit_bytes), s.sweep_plot);
  const gui::Rgb expect[] = {gui::kSweepPareto, gui::kSweepPareto, gui::kSweepPoint,
                             gui::kSweepNotFit};
  // The one that does not fit sits in the band along the top, above every step time.
  CHECK(ax.no_fit_band == gui::kSweepNoFitBand);
  CHECK(ax.point_y(f.points[3]) < ax.area.y + ax.no_fit_band);
  CHECK(ax.y_of(ax.y_max) >= ax.area.y + ax.no_fit_band);
  for (size_t i = 0; i < f.points.size(); ++i) {
    const int x =
        static_cast<int>(std::floor(ax.x_of(static_cast<double>(f.points[i].peak_reserved_bytes))));
    const int y = static_cast<int>(std::floor(ax.point_y(f.points[i])));
    INFO("point " << i);
    // The point's square (at least 3 x 3 around its centre) in its color.
    CHECK(img.count(expect[i], x - 1, y - 1, x + 2, y + 2) == 9);
  }
  // The limit line at 80 GiB, from the top of the plot to its bottom.
  const int lx = static_cast<int>(std::floor(ax.x_of(80.0 * (1 << 30))));
  const int mid = static_cast<int>(ax.area.y + ax.area.h * 0.5f);
  CHECK(img.count(gui::kSweepLimit, lx - 1, mid, lx + 2, mid + 1) >= 1);
  // Nothing pareto-colored outside the front's points and the segment between them.
  const int xa = static_cast<int>(ax.x_of(10.0 * (1 << 30))) - 8;
  const int xb = static_cast<int>(ax.x_of(30.0 * (1 << 30))) + 8;
  CHECK(img.count(gui::kSweepPareto, 0, 0, xa, kH) == 0);
  CHECK(img.count(gui::kSweepPareto, xb, 0, static_cast<int>(s.sweep_plot.x1()), kH) == 0);
}

TEST_CASE("screenshot: a trace that does not load exits 2 with its error and writes no PNG") {
  shardscope::test::TempDir dir("gui_err");
  const std::string bad = (dir.path / "bad.json").string();
  std::ofstream(bad) << "{\"format\": \"shardscope.trace\", \"version\": 999}";
  const std::string png = (dir.path / "err.png").string();
  const std::string err = (dir.path / "err.txt").string();
  CHECK(view(bad, png, err) == 2);
  CHECK(slurp(err).find("cannot load " + bad) != std::string::npos);
  CHECK(slurp(err).find("no screenshot written") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(png));
}

TEST_CASE("screenshot: /dev/full fails with exit 1 and stays a device, a directory exits 2") {
  shardscope::test::TempDir dir("gui_out");
  const std::string trace = (dir.path / "t.json").string();
  tr::save_trace(hand_made(), trace);
  const std::string err = (dir.path / "err.txt").string();
  CHECK(view(trace, "/dev/full", err, true) == 1);
  CHECK(slurp(err).find("'/dev/full': write failed: No space left on device") != std::string::npos);
  struct stat st;
  REQUIRE(::stat("/dev/full", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  CHECK(view(trace, dir.path.string(), err) == 2);
  CHECK(slurp(err).find("--screenshot: '" + dir.path.string() + "': is a directory") !=
        std::string::npos);
}

TEST_CASE(
    "screenshot: a simulated gpt2-tiny trace (2 ranks simulated as 1) draws compute and "
    "all-gather") {
  shardscope::test::TempDir dir("gui_sim");
  const std::string trace = (dir.path / "sim.bin").string();
  // On a100-sxm, which has no host dispatch figures: on the GH100 presets the
  // host launches gpt2-tiny's microsecond kernels ~25-1200 us apart
  // (op_level.host_dispatch_ns), and the 2.3 ms step leaves its 7 us
  // all-gather a few pixels wide at this size.
  const std::string cmd = std::string(SHARDSCOPE_CLI) +
                          " simulate --model gpt2-tiny --world 2 --hw a100-sxm --trace " + trace +
                          " >/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const std::string png = (dir.path / "sim.png").string();
  const std::string err = (dir.path / "err.txt").string();
  REQUIRE(view(trace + " --select '0:all_gather <root>'", png, err) == 0);
  const Image img = read_png(png);
  const gui::ScreenLayout s = gui::screen_layout(kW, kH, true);
  const gui::TimelineRects rects = gui::timeline_rects(s.timeline);
  const int x0 = static_cast<int>(rects.lanes.x), x1 = static_cast<int>(rects.lanes.x1());
  const int y0 = static_cast<int>(rects.lanes.y), y1 = static_cast<int>(rects.lanes.y1());
  CHECK(img.count(gui::category_color(tr::Category::compute), x0, y0, x1, y1) > 100);
  CHECK(img.count(gui::category_color(tr::Category::comm_all_gather), x0, y0, x1, y1) > 100);
  CHECK(img.count(gui::category_color(tr::Category::comm_reduce_scatter), x0, y0, x1, y1) > 100);
  // The selected all-gather is outlined.
  CHECK(img.count(gui::kSelection, x0, y0, x1, y1) > 20);
  // A name that does not exist is reported, not ignored: an input error.
  std::filesystem::remove(png);
  CHECK(view(trace + " --select nothing_named_so", png, err) == 2);
  CHECK_FALSE(std::filesystem::exists(png));
  CHECK(slurp(err).find("--select: no event named 'nothing_named_so'") != std::string::npos);
}
