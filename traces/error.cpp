#include "traces/error.h"

#include "traces/utf8.h"

namespace shardscope::traces {

namespace {

std::string join(const std::string& file, const std::string& position, const std::string& detail) {
  std::string s = file;
  if (!position.empty()) s += (s.empty() ? "" : ": ") + position;
  s += (s.empty() ? "" : ": ") + detail;
  return s;
}

// `s` itself when at most `max` bytes, else cut at a UTF-8 boundary with
// the byte count appended.
std::string cut(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
  return s.substr(0, n) + "... (" + std::to_string(s.size()) + " bytes)";
}

}  // namespace

std::string clip_input(std::string_view s, size_t max) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  size_t i = 0;
  while (i < s.size() && out.size() < max) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    const size_t n = c >= 0x80 ? utf8_sequence_length(s, i) : 0;
    if (n > 0) {
      if (out.size() + n > max) break;
      out.append(s.data() + i, n);
      i += n;
      continue;
    }
    if (out.size() + 4 > max) break;
    out += "\\x";
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
    ++i;
  }
  if (i < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string quote_input(std::string_view s, size_t max) {
  return "\"" + clip_input(s, max) + "\"";
}

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
    : std::runtime_error(join(file, cut(position, 400), cut(detail, 800))),
      kind_(kind),
      file_(file),
      position_(cut(position, 400)),
      detail_(cut(detail, 800)) {}

}  // namespace shardscope::traces
