#include "gui/window.h"

#include <imgui.h>

namespace shardscope::gui {

bool begin_fixed_window(const char* name, const Rect& r, bool padded) {
  ImGui::SetNextWindowPos(ImVec2(r.x, r.y));
  ImGui::SetNextWindowSize(ImVec2(r.w, r.h));
  const ImGuiWindowFlags flags = ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                                 ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoSavedSettings |
                                 ImGuiWindowFlags_NoBringToFrontOnFocus |
                                 (padded ? 0 : ImGuiWindowFlags_NoScrollWithMouse);
  if (!padded) ImGui::PushStyleVar(ImGuiStyleVar_WindowPadding, ImVec2(0, 0));
  ImGui::PushStyleVar(ImGuiStyleVar_WindowBorderSize, 0.0f);
  ImGui::PushStyleVar(ImGuiStyleVar_WindowRounding, 0.0f);
  const bool open = ImGui::Begin(name, nullptr, flags);
  ImGui::PopStyleVar(padded ? 2 : 3);
  return open;
}

}  // namespace shardscope::gui
