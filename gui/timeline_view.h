// The timeline widget: ranks as collapsible groups, one lane per stream (rows
// for nested events), colors by category with a legend, step markers, a time
// ruler, LOD-folded drawing, hover tooltip, click selection, flows of the
// selected event, and navigation (wheel zoom at the cursor, left-drag pan,
// right-drag zoom to range, W/S zoom, A/D pan, Ctrl+wheel scroll).
#pragma once

#include <cstddef>
#include <vector>

#include "gui/app_state.h"
#include "gui/layout.h"
#include "gui/trace_doc.h"

namespace shardscope::gui {

// Below this width (pixels) consecutive events fold into one drawn item.
constexpr double kFoldPixels = 3.0;

struct TimelineDrawStats {
  size_t items = 0;         // rectangles drawn for events (single or folded)
  size_t folded_items = 0;  // of which folds
  size_t rows_drawn = 0;    // lane rows intersecting the viewport
};

// Draws `doc` into `rects` with the current window's draw list. `shift_ns`
// moves the view: view time v shows index time v + shift_ns (compare aligns
// steps with it). With `interactive`, handles mouse and keyboard input on the
// current window. Call between ImGui::Begin and End.
void draw_timeline(const TraceDoc& doc, const TimelineRects& rects, TimelineState& st,
                   double shift_ns, bool interactive, std::vector<DrawItem>& scratch,
                   TimelineDrawStats* stats = nullptr);

// Tooltip/details lines of one event (name, unit, op, category, lane,
// start, duration, bytes, FLOPs...).
void event_details(const TraceDoc& doc, size_t rank_slot, uint32_t event, bool full);

// The first event named `name` (by start) on the rank with id `rank` (-1:
// any rank); false when there is none.
bool find_event(const TraceDoc& doc, int rank, const std::string& name, size_t* rank_slot,
                uint32_t* event);

}  // namespace shardscope::gui
