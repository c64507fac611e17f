// Errors of output files. Two kinds, because the CLI contract gives them
// different exit codes:
//   OutputTargetError: the path cannot be an output (a directory, a block
//     device, a socket, a read-only file, a missing folder). Found before
//     anything is written; an input error, exit 2.
//   OutputWriteError: writing, flushing, closing or renaming failed (disk
//     full, /dev/full, I/O error). A runtime failure, exit 1.
// Both name the path; the message never names the temporary alone.
#pragma once

#include <stdexcept>
#include <string>

namespace shardscope::io {

class OutputError : public std::runtime_error {
 public:
  OutputError(const std::string& path, const std::string& detail);
  const std::string& path() const { return path_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string path_;
  std::string detail_;
};

class OutputTargetError : public OutputError {
 public:
  using OutputError::OutputError;
};

class OutputWriteError : public OutputError {
 public:
  using OutputError::OutputError;
};

// strerror(err) as a std::string.
std::string errno_text(int err);

}  // namespace shardscope::io
