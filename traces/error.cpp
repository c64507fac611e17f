#include "traces/error.h"

namespace shardscope::traces {

namespace {

std::string join(const std::string& file, const std::string& position, const std::string& detail) {
  std::string s = file;
  if (!position.empty()) s += (s.empty() ? "" : ": ") + position;
  s += (s.empty() ? "" : ": ") + detail;
  return s;
}

}  // namespace

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::io:
      return "io";
    case ErrorKind::malformed:
      return "malformed";
    case ErrorKind::schema:
      return "schema";
    case ErrorKind::unsupported_version:
      return "unsupported_version";
    case ErrorKind::truncated:
      return "truncated";
    case ErrorKind::checksum:
      return "checksum";
  }
  return "unknown";
}

TraceError::TraceError(ErrorKind kind, const std::string& file, const std::string& position,
                       const std::string& detail)
    : std::runtime_error(join(file, position, detail)),
      kind_(kind),
      file_(file),
      position_(position),
      detail_(detail) {}

}  // namespace shardscope::traces
