// The viewer's frame: every window of the current tab laid out for a
// framebuffer of w x h (gui/layout.h), jobs polled, scripted options applied
// once the traces are loaded. Independent of the platform: viewer.cpp runs it
// in a GLFW window, tests and the bench can run it with no window at all.
#pragma once

#include "gui/app_state.h"
#include "gui/viewer.h"

namespace shardscope::gui {

// Starts loading the traces (background jobs) and the sweep file; picks the
// first tab (compare for two traces, sweep for a sweep alone, else timeline).
void app_init(AppState& s, const ViewerOptions& options);

// One frame's windows; call between ImGui::NewFrame and ImGui::Render.
void app_frame(AppState& s, float width, float height);

// True once every job has finished and the scripted options were applied:
// what a screenshot should wait for.
bool app_settled(const AppState& s);

// Number of load errors (traces, sweep file, simulations).
size_t app_errors(const AppState& s);

}  // namespace shardscope::gui
