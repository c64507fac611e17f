// The platform side: a GLFW window with an OpenGL 3 context, ImGui's GLFW and
// OpenGL3 backends, and the frame loop (interactive, or N frames then a PNG).
#include "gui/viewer.h"

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <thread>

#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>

#include "gui/app.h"
#include "gui/screenshot.h"
#include "gui/script.h"

namespace shardscope::gui {

void check_viewer_options(const ViewerOptions& o) {
  if (o.traces.size() > 2) throw std::invalid_argument("at most two traces");
  if (o.frames < 1 || o.frames > 100000)
    throw std::invalid_argument("--frames: must be in [1, 100000]");
  double t0 = 0, t1 = 0;
  if (!o.zoom.empty()) parse_time_range(o.zoom, "--zoom", &t0, &t1);
  int rank = 0;
  std::string name;
  if (!o.select.empty()) parse_select(o.select, &rank, &name);
  if (!o.memory_time.empty()) parse_time_ns(o.memory_time, "--mem-time");
  if (!o.tab.empty()) {
    const Tab t = parse_tab(o.tab);
    if (t == Tab::compare && o.traces.size() != 2)
      throw std::invalid_argument("--tab compare needs two traces");
    if (t == Tab::sweep && o.sweep_file.empty())
      throw std::invalid_argument("--tab sweep needs --sweep FILE");
  }
  if (o.open_config >= 0 && o.sweep_file.empty())
    throw std::invalid_argument("--open-config needs --sweep FILE");
}

namespace {

void glfw_error(int code, const char* text) {
  std::fprintf(stderr, "shardscope view: GLFW error %d: %s\n", code, text);
}

struct GlfwSession {
  GLFWwindow* window = nullptr;
  ~GlfwSession() {
    if (window) glfwDestroyWindow(window);
    glfwTerminate();
  }
};

}  // namespace

int run_viewer(const ViewerOptions& options) {
  check_viewer_options(options);
  const bool headless = !options.screenshot_png.empty();
  glfwSetErrorCallback(glfw_error);
  if (!glfwInit()) {
    std::fprintf(stderr,
                 "shardscope view: cannot initialise GLFW (is there an X server? "
                 "headless: xvfb-run -a shardscope view ... --screenshot OUT.png)\n");
    return 1;
  }
  GlfwSession session;
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
  glfwWindowHint(GLFW_RESIZABLE, headless ? GLFW_FALSE : GLFW_TRUE);
  session.window = glfwCreateWindow(options.width, options.height, "shardscope", nullptr, nullptr);
  if (!session.window) {
    std::fprintf(stderr, "shardscope view: cannot create an OpenGL 3 window\n");
    return 1;
  }
  glfwMakeContextCurrent(session.window);
  glfwSwapInterval(headless ? 0 : 1);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // the layout is computed, never saved
  ImGui::StyleColorsDark();
  ImGui_ImplGlfw_InitForOpenGL(session.window, true);
  ImGui_ImplOpenGL3_Init("#version 130");

  int status = 0;
  {
    AppState state;
    app_init(state, options);
    int frames_after_settled = 0;
    while (!glfwWindowShouldClose(session.window)) {
      if (headless || busy(state))
        glfwPollEvents();
      else
        glfwWaitEventsTimeout(0.25);
      ImGui_ImplOpenGL3_NewFrame();
      ImGui_ImplGlfw_NewFrame();
      ImGui::NewFrame();
      int fb_w = 0, fb_h = 0;
      glfwGetFramebufferSize(session.window, &fb_w, &fb_h);
      app_frame(state, io.DisplaySize.x, io.DisplaySize.y);
      ImGui::Render();
      glViewport(0, 0, fb_w, fb_h);
      glClearColor(0.08f, 0.08f, 0.09f, 1.0f);
      glClear(GL_COLOR_BUFFER_BIT);
      ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
      if (headless && app_settled(state) && ++frames_after_settled >= options.frames) {
        // An input that did not load (a trace, --sweep, --select,
        // --open-config) is an input error: exit 2 and write no PNG, so
        // that no output of a failed command looks like a good one.
        if (app_errors(state) > 0) {
          std::fprintf(stderr, "shardscope view: no screenshot written (%s)\n",
                       options.screenshot_png.c_str());
          break;
        }
        try {
          write_framebuffer_png(options.screenshot_png, fb_w, fb_h);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "shardscope view: %s\n", e.what());
          status = 1;
        }
        break;
      }
      glfwSwapBuffers(session.window);
      if (headless && busy(state)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (app_errors(state) > 0) status = 2;
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  return status;
}

}  // namespace shardscope::gui
