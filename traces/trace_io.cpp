#include "traces/trace_io.h"

#include <cstdio>
#include <cstring>
#include <optional>

#include "traces/binary_format.h"
#include "traces/error.h"
#include "traces/file_io.h"
#include "traces/input.h"
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

namespace {

// shardscope's JSON names its format in its first bytes.
bool native_json_head(std::string_view text) {
  const std::string_view head = text.substr(0, 4096);
  const size_t f = head.find("\"format\"");
  return f != std::string_view::npos && head.find(kJsonFormatName, f) != std::string_view::npos;
}

}  // namespace

TraceFormat detect_format(std::string_view text) {
  if (text.size() >= 1 &&
      std::memcmp(text.data(), kBinaryMagic, text.size() < 8 ? text.size() : 8) == 0)
    return TraceFormat::binary;
  if (native_json_head(text)) return TraceFormat::json;
  if (text.find("\"traceEvents\"") != std::string_view::npos) return TraceFormat::kineto;
  return TraceFormat::json;
}

Trace load_trace(const std::string& path) {
  return load_trace(path, InputLimits(), nullptr);
}

Trace load_trace(const std::string& path, const InputLimits& limits, InputStats* stats) {
  // The first chunk decides what the file is; the rest is read only for a
  // trace (binary traces straight into their arrays, JSON through the guard),
  // so garbage costs one chunk however large the file.
  std::optional<InputFile> in;
  in.emplace(path, limits, stats);
  std::string text;
  in->read(text, kInputChunk);
  if (text.empty())
    throw TraceError(ErrorKind::malformed, path, "byte 1",
                     "empty file: not a shardscope or Kineto trace");
  size_t magic = 0;  // leading bytes equal to the binary magic's
  while (magic < 8 && magic < text.size() && text[magic] == kBinaryMagic[magic]) ++magic;
  // All of the magic, or a file that ends inside it (a truncated binary
  // trace: its reader says so): binary.
  if (magic == 8 || magic == text.size()) {
    if (!in->gzip()) {
      in.reset();
      return read_trace_binary(path);
    }
    while (in->read(text, size_t{1} << 20) > 0) {
    }
    return read_trace_binary(text.data(), text.size(), path);
  }
  if (magic >= 4)
    throw TraceError(ErrorKind::malformed, path, "byte " + std::to_string(magic + 1),
                     "a damaged binary trace magic: the first " + std::to_string(magic) +
                         " bytes match it, byte " + std::to_string(magic + 1) + " does not");
  // JSON: whitespace, garbage, huge strings and deep nesting fail in the
  // guard, at the first bad byte. A Kineto trace that says so in its first
  // chunk (as detect_format would decide from the whole text) is parsed as
  // a stream, never held whole.
  if (!native_json_head(text) && text.find("\"traceEvents\"") != std::string::npos)
    return import_kineto_stream(*in, limits, std::move(text));
  text = read_json_text(*in, limits, std::move(text));
  in.reset();
  switch (detect_format(text)) {
    case TraceFormat::binary:  // JSON text cannot start with the magic
    case TraceFormat::json:
      break;
    case TraceFormat::kineto:
      return import_kineto_text(text, path);
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
  OutputFile file(path);
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
