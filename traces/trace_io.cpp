#include "traces/trace_io.h"

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
  const std::string text = read_file(path);
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
