// Fixed, undecorated top-level windows: the viewer lays its windows out
// itself (ImGui 1.86 has no docking), at rectangles from gui/layout.h.
#pragma once

#include "gui/layout.h"

namespace shardscope::gui {

// ImGui::Begin at `r` with no title bar, move, resize or saved settings.
// `padded`: the style's window padding; else none (drawing by coordinates).
// Always pair with ImGui::End(), whatever it returns.
bool begin_fixed_window(const char* name, const Rect& r, bool padded);

}  // namespace shardscope::gui
