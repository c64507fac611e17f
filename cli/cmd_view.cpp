#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"

#ifdef SHARDSCOPE_HAVE_GUI
#include "gui/viewer.h"
#endif

namespace shardscope::cli {

int cmd_view(int argc, char** argv) {
  static const char* kUsage = "shardscope view [TRACE [TRACE_B]] [--sweep FILE] [--screenshot PNG]";
#ifdef SHARDSCOPE_HAVE_GUI
  Args args(argc, argv, {{"sweep"}, {"screenshot"}}, true);
  if (args.help()) {
    std::printf("usage: %s\n", kUsage);
    return 0;
  }
  if (args.positionals().size() > 2) throw UsageError("at most two traces");
  gui::ViewerOptions options;
  options.traces = args.positionals();
  options.sweep_file = args.get("sweep");
  options.screenshot_png = args.get("screenshot");
  return gui::run_viewer(options);
#else
  (void)kUsage;
  return not_implemented("view", "shardscope view (this build has no GUI: SHARDSCOPE_GUI=OFF)",
                         argc, argv);
#endif
}

}  // namespace shardscope::cli
