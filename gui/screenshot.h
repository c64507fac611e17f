// Headless screenshots: the framebuffer of the current OpenGL context read
// back and written as a PNG (stb_image_write from libstb).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardscope::gui {

// RGB rows top to bottom from OpenGL's bottom-to-top RGBA rows (alpha dropped).
std::vector<uint8_t> flip_rgba_to_rgb(const std::vector<uint8_t>& rgba, int width, int height);

// Reads the back buffer of the current context (width x height) and writes
// `path`. Throws std::runtime_error naming the file when it cannot.
void write_framebuffer_png(const std::string& path, int width, int height);

}  // namespace shardscope::gui
