// Entry point of the timeline viewer (`shardscope view`).
#pragma once

#include <string>
#include <vector>

namespace shardscope::gui {

struct ViewerOptions {
  std::vector<std::string> traces;  // zero, one or two trace files
  std::string sweep_file;           // --sweep FILE
  std::string screenshot_png;       // --screenshot PNG: render headless and exit
};

// Returns a process exit status; errors are printed to stderr.
int run_viewer(const ViewerOptions& options);

}  // namespace shardscope::gui
