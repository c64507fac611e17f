#include "gui/screenshot.h"

#include <stdexcept>
#include <string>

#define GL_GLEXT_PROTOTYPES
#include <GL/gl.h>
#include <stb/stb_image_write.h>

#include "io/output_file.h"

namespace shardscope::gui {

std::vector<uint8_t> flip_rgba_to_rgb(const std::vector<uint8_t>& rgba, int width, int height) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * static_cast<size_t>(height) * 3);
  for (int y = 0; y < height; ++y) {
    const uint8_t* src =
        rgba.data() + static_cast<size_t>(height - 1 - y) * static_cast<size_t>(width) * 4;
    uint8_t* dst = rgb.data() + static_cast<size_t>(y) * static_cast<size_t>(width) * 3;
    for (int x = 0; x < width; ++x) {
      dst[3 * x + 0] = src[4 * x + 0];
      dst[3 * x + 1] = src[4 * x + 1];
      dst[3 * x + 2] = src[4 * x + 2];
    }
  }
  return rgb;
}

void write_framebuffer_png(const std::string& path, int width, int height) {
  std::vector<uint8_t> rgba(static_cast<size_t>(width) * static_cast<size_t>(height) * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, width, height, GL_RGBA, GL_UNSIGNED_BYTE, rgba.data());
  if (glGetError() != GL_NO_ERROR)
    throw std::runtime_error("--screenshot: reading the framebuffer failed");
  const std::vector<uint8_t> rgb = flip_rgba_to_rgb(rgba, width, height);
  // Encoded in memory, then written through io::OutputFile: a regular file is
  // replaced atomically, a device or FIFO written in place, write errors thrown.
  std::string png;
  const auto append = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data),
                                               static_cast<size_t>(size));
  };
  if (!stbi_write_png_to_func(append, &png, width, height, 3, rgb.data(), width * 3))
    throw std::runtime_error("--screenshot: PNG encoding failed");
  io::write_output_file(path, png);
}

}  // namespace shardscope::gui
