// Everything the viewer's windows share: the loaded traces, the sweep, the
// jobs under way and the state of each view. One instance per viewer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gui/layout.h"
#include "gui/lod.h"
#include "gui/memory_series.h"
#include "gui/script.h"
#include "gui/sweep_file.h"
#include "gui/time_view.h"
#include "gui/trace_doc.h"
#include "gui/viewer.h"

namespace shardscope::gui {

// One timeline widget: view, scroll, collapsed ranks, selection, drags.
struct TimelineState {
  TimeView view;  // times relative to the trace index origin (plus the caller's shift)
  bool fitted = false;
  std::vector<uint8_t> collapsed;  // per rank slot
  float scroll_y = 0;
  bool has_selection = false;
  size_t sel_rank = 0;     // rank slot
  uint32_t sel_event = 0;  // index into RankTrace::events
  bool range_selecting = false;
  double range_t0 = 0;  // view time where the range drag began
};

// The time chosen in the memory plot and what is live then.
struct MemoryPick {
  bool has = false;
  size_t rank = 0;      // rank slot
  int64_t time_ns = 0;  // absolute trace time
  LiveMemory live;
};

struct AppState {
  ViewerOptions options;
  Tab tab = Tab::timeline;
  bool force_tab = true;  // select `tab` in the tab bar on the next frame

  std::shared_ptr<TraceDoc> a, b;  // a: the timeline's trace; b: compared with a
  std::unique_ptr<TraceJob> job_a, job_b, job_sim;
  std::optional<SweepFile> sweep;
  std::string sweep_error;
  std::vector<std::string> errors;  // every load error, shown in the top bar

  TimelineState timeline;
  float memory_scroll = 0;
  MemoryPick memory_pick;

  // Compare: one view for both, in time relative to the chosen step's start.
  TimelineState compare_a, compare_b;
  TimeView compare_view;
  bool compare_fitted = false;
  int64_t compare_step = 0;  // step number; ignored when a trace has no steps

  // Sweep explorer.
  int64_t sweep_hover = -1;
  int64_t sweep_selected = -1;
  double sweep_limit_bytes = 0;  // the draggable memory-limit line
  bool sweep_dragging_limit = false;
  std::string sweep_status;

  bool script_pending = true;  // --zoom/--select/--mem-time not applied yet
  std::vector<DrawItem> scratch;
};

// True while a trace is loading or a configuration is being simulated.
bool busy(const AppState& s);

}  // namespace shardscope::gui
