// Entry point of the timeline viewer (`shardscope view`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardscope::gui {

struct ViewerOptions {
  std::vector<std::string> traces;  // zero, one or two trace files
  std::string sweep_file;           // --sweep FILE (`shardscope sweep --out`)
  std::string screenshot_png;       // --screenshot PNG: render, write the PNG and exit
  int frames = 3;                   // --frames N: frames rendered before the screenshot
  int width = 1600, height = 1000;  // --size WxH: window (and screenshot) size
  // Scripting what is shown (see gui/script.h for the syntax):
  std::string tab;           // --tab timeline|stats|compare|sweep
  std::string zoom;          // --zoom A:B  time range relative to the trace start
  std::string select;        // --select [RANK:]NAME  first event of that name
  std::string memory_time;   // --mem-time T  time of the live-buffers list
  int64_t open_config = -1;  // --open-config N  simulate sweep configuration N and open it
};

// Throws std::invalid_argument naming the option when a scripting option
// does not parse (the CLI turns it into a usage error).
void check_viewer_options(const ViewerOptions& options);

// Opens the window (or renders headless with --screenshot). Returns a process
// exit status: 0, or 1 when a trace or the sweep file did not load (the error
// is shown in the window and printed to stderr), or when the window or the
// screenshot could not be made.
int run_viewer(const ViewerOptions& options);

}  // namespace shardscope::gui
