// Errors raised by every reader and writer of traces. Each carries the file
// (or a name for in-memory input), the position of the problem (a byte offset
// such as "byte 1234" or a JSON path such as "/ranks/0/events/12/dur_ns") and
// a detail; what() joins them. The CLI prints what() and exits with status 2.
#pragma once

#include <stdexcept>
#include <string>

namespace shardscope::traces {

enum class ErrorKind {
  io,                   // cannot open, read or write a file
  malformed,            // not valid JSON, or bytes that do not form the format
  schema,               // valid syntax, but a field is missing, of the wrong type or out of range
  unsupported_version,  // a version this build does not read
  truncated,            // the input ends before the format says it should
  checksum,             // a binary section whose checksum does not match
};

const char* error_kind_name(ErrorKind kind);

class TraceError : public std::runtime_error {
 public:
  TraceError(ErrorKind kind, const std::string& file, const std::string& position,
             const std::string& detail);

  ErrorKind kind() const { return kind_; }
  const std::string& file() const { return file_; }
  const std::string& position() const { return position_; }
  const std::string& detail() const { return detail_; }

 private:
  ErrorKind kind_;
  std::string file_;
  std::string position_;
  std::string detail_;
};

}  // namespace shardscope::traces
