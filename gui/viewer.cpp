#include "gui/viewer.h"

#include <cstdio>

#include <GLFW/glfw3.h>
#include <imgui.h>

namespace shardscope::gui {

int run_viewer(const ViewerOptions& /*options*/) {
  // The viewer's windows land with the GUI issue; until then say so plainly.
  std::fprintf(stderr, "shardscope view: not implemented yet (ImGui %s, GLFW %s linked)\n",
               IMGUI_VERSION, glfwGetVersionString());
  return 2;
}

}  // namespace shardscope::gui
