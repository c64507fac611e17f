#include "traces/trace_io.h"

#include <cstdio>
#include <cstring>

#include "traces/binary_format.h"
#include "traces/error.h"
#include "traces/file_io.h"
#include "traces/json_format.h"
#include "traces/kineto_import.h"

namespace shardscope::traces {

const char* trace_format_name(TraceFormat f) {
  switch (f) {
    case TraceFormat::binary:
      return "binary";
    case TraceFormat::json:
      return "json";
    case TraceFormat::kineto:
      return "kineto";
  }
  return "unknown";
}

TraceFormat detect_format(std::string_view text) {
  if (text.size() >= 1 &&
      std::memcmp(text.data(), kBinaryMagic, text.size() < 8 ? text.size() : 8) == 0)
    return TraceFormat::binary;
  const std::string_view head = text.substr(0, 4096);
  const size_t f = head.find("\"format\"");
  if (f != std::string_view::npos && head.find(kJsonFormatName, f) != std::string_view::npos)
    return TraceFormat::json;
  if (text.find("\"traceEvents\"") != std::string_view::npos) return TraceFormat::kineto;
  return TraceFormat::json;
}

Trace load_trace(const std::string& path) {
  // Binary traces are read straight into their arrays; peek first so that a
  // 500 MB binary file is not read into a string as well.
  char head[8] = {};
  size_t n = 0;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    n = std::fread(head, 1, sizeof head, f);
    std::fclose(f);
  }
  if (n > 0 && detect_format(std::string_view(head, n)) == TraceFormat::binary)
    return read_trace_binary(path);
  const std::string text = read_file(path);  // inflates .gz
  // Neither the binary magic nor JSON: say what the file is not, rather than
  // a JSON parser's "invalid literal".
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos)
    throw TraceError(ErrorKind::malformed, path, "byte 1",
                     text.empty() ? "empty file: not a shardscope or Kineto trace"
                                  : "only whitespace: not a shardscope or Kineto trace");
  size_t magic = 0;  // leading bytes equal to the binary magic's
  while (magic < 8 && magic < text.size() && text[magic] == kBinaryMagic[magic]) ++magic;
  // All of the magic, or a file that ends inside it (a truncated binary
  // trace: its reader says so): binary.
  const bool binary = magic == 8 || magic == text.size();
  if (!binary && magic >= 4)
    throw TraceError(ErrorKind::malformed, path, "byte " + std::to_string(magic + 1),
                     "a damaged binary trace magic: the first " + std::to_string(magic) +
                         " bytes match it, byte " + std::to_string(magic + 1) + " does not");
  if (!binary && text[first] != '{' && text[first] != '[') {
    char bytes[64];
    const auto b = [&](size_t i) {
      return i < text.size() ? static_cast<unsigned>(static_cast<unsigned char>(text[i])) : 0u;
    };
    std::snprintf(bytes, sizeof bytes, "%02x %02x %02x %02x", b(first), b(first + 1), b(first + 2),
                  b(first + 3));
    throw TraceError(ErrorKind::malformed, path, "byte " + std::to_string(first + 1),
                     std::string("not a shardscope or Kineto trace: it starts with bytes ") +
                         bytes + ", neither the binary trace magic (\\x89SSTRC) nor a JSON object");
  }
  switch (detect_format(text)) {
    case TraceFormat::binary:
      return read_trace_binary(text.data(), text.size(), path);
    case TraceFormat::kineto:
      return import_kineto_text(text, path);
    case TraceFormat::json:
      break;
  }
  return read_trace_json(text, path);
}

namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

void save_trace_json(const Trace& t, const std::string& path) {
  validate(t, path);
  AtomicFile file(path);
  OutBuffer out(&file);
  write_trace_json(t, out);
  file.commit();
}

void save_trace(const Trace& t, const std::string& path) {
  if (ends_with(path, ".json")) {
    save_trace_json(t, path);
  } else {
    write_trace_binary(t, path);
  }
}

}  // namespace shardscope::traces
