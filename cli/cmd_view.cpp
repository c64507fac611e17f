#include <cstdio>
#include <stdexcept>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output_flags.h"

#ifdef SHARDSCOPE_HAVE_GUI
#include "gui/script.h"
#include "gui/viewer.h"
#endif

namespace shardscope::cli {

int cmd_view(int argc, char** argv) {
  static const char* kUsage =
      "shardscope view [TRACE [TRACE_B]] [--sweep FILE] [--screenshot PNG] [--frames N]\n"
      "                [--size WxH] [--tab timeline|stats|compare|sweep] [--zoom A:B]\n"
      "                [--select [RANK:]NAME] [--mem-time T] [--open-config N]\n\n"
      "  TRACE [TRACE_B]      traces to show (any format load_trace reads); two: compare them\n"
      "  --sweep FILE         sweep explorer for `shardscope sweep --out FILE` (JSON or CSV)\n"
      "  --screenshot PNG     render headless (any X server, e.g. xvfb-run), write PNG, exit\n"
      "  --frames N           frames rendered once loaded, before the screenshot (default 3)\n"
      "  --size WxH           window size (default 1600x1000)\n"
      "  --tab T              first view shown\n"
      "  --zoom A:B           time range shown, relative to the trace start (250, 1.5us, 2ms)\n"
      "  --select [RANK:]NAME select the first event of that name (on that rank)\n"
      "  --mem-time T         list the live buffers at T (relative to the trace start)\n"
      "  --open-config N      simulate configuration N of the sweep file and open it";
#ifdef SHARDSCOPE_HAVE_GUI
  Args args(argc, argv,
            {{"sweep"},
             {"screenshot"},
             {"frames"},
             {"size"},
             {"tab"},
             {"zoom"},
             {"select"},
             {"mem-time"},
             {"open-config"}},
            true);
  if (args.help()) {
    std::printf("usage: %s\n", kUsage);
    return 0;
  }
  check_output_flag(args, "screenshot");
  gui::ViewerOptions options;
  options.traces = args.positionals();
  options.sweep_file = args.get("sweep");
  options.screenshot_png = args.get("screenshot");
  options.frames = static_cast<int>(args.get_int("frames", 3, 1, 100000));
  options.tab = args.get("tab");
  options.zoom = args.get("zoom");
  options.select = args.get("select");
  options.memory_time = args.get("mem-time");
  options.open_config = args.get_int("open-config", -1, 0, int64_t{1} << 40);
  try {
    if (args.has("size")) gui::parse_size(args.get("size"), &options.width, &options.height);
    gui::check_viewer_options(options);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  return gui::run_viewer(options);
#else
  (void)kUsage;
  return not_implemented("view", "shardscope view (this build has no GUI: SHARDSCOPE_GUI=OFF)",
                         argc, argv);
#endif
}

}  // namespace shardscope::cli
