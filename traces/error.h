// Errors raised by every reader and writer of traces. Each carries the file
// (or a name for in-memory input), the position of the problem (a byte offset
// such as "byte 1234" or a JSON path such as "/ranks/0/events/12/dur_ns") and
// a detail; what() joins them. The CLI prints what() and exits with status 2.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

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

// The most bytes of input text (a name, a key, a category, a parser's echo
// of a token) an error message quotes.
constexpr size_t kMaxQuotedInput = 200;

// `s` cut to at most `max` bytes (at a UTF-8 character boundary) with
// "... (N bytes)" appended when cut; control characters and bytes that are
// not UTF-8 are shown as \xNN. For every piece of input put in a message.
std::string clip_input(std::string_view s, size_t max = kMaxQuotedInput);
// clip_input(s, max) in double quotes.
std::string quote_input(std::string_view s, size_t max = kMaxQuotedInput);

// A last guard on top of clip_input at the call sites: the position is cut
// to 400 bytes and the detail to 800, so no message echoes megabytes of input.
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
