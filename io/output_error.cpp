#include "io/output_error.h"

#include <cstring>

namespace shardscope::io {

OutputError::OutputError(const std::string& path, const std::string& detail)
    : std::runtime_error("'" + path + "': " + detail), path_(path), detail_(detail) {}

std::string errno_text(int err) {
  return std::strerror(err);
}

}  // namespace shardscope::io
