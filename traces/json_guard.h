// A lexical check of JSON text as it streams in, ahead of the readers (which
// need the whole text): it fails at the first byte that cannot be JSON, so a
// file of garbage is refused after one chunk, and it bounds what the readers
// would later have to hold (string length, nesting). It accepts every RFC 8259
// document within the limits; what it lets through the readers check fully.
//
// Checked: the text starts (after whitespace) with '{' or '['; outside
// strings only whitespace, structural characters and the characters of
// numbers and true/false/null; no control characters in strings; brackets
// balance and match; nothing but whitespace after the top-level value; depth
// and string length within InputLimits. Not checked: UTF-8, escapes, the order
// of tokens (the readers do).
//
// Offsets in its errors are 0-based byte offsets into the (decompressed)
// text, as the JSON scanner's; the "not a trace" error for the first byte
// keeps load_trace's 1-based "byte 1".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "traces/input.h"

namespace shardscope::traces {

class JsonGuard {
 public:
  JsonGuard(const std::string& file, const InputLimits& limits);
  // The next `n` bytes of the text. Throws TraceError(malformed).
  void feed(const char* data, size_t n);
  // At the end of the text: throws for a text of whitespace only. (Truncated
  // documents are left to the readers, which say what is missing.)
  void finish() const;
  uint64_t offset() const { return offset_; }

 private:
  [[noreturn]] void fail(uint64_t at, const std::string& detail) const;
  [[noreturn]] void fail_long_string() const;
  [[noreturn]] void fail_start(const char* data, size_t n, size_t i) const;
  void open(char c, uint64_t at);
  void close(char c, uint64_t at);

  std::string file_;  // a copy: callers pass temporaries
  InputLimits limits_;
  uint64_t offset_ = 0;  // of data[0] in the current feed
  size_t depth_ = 0;
  uint64_t objects_ = 0;  // bit d: the container at depth d + 1 is an object (depth <= 64)
  bool started_ = false;  // seen the first '{' or '['
  bool done_ = false;     // the top-level value is closed
  bool in_string_ = false;
  bool escape_ = false;  // the previous string byte was a backslash
  char last_ = 0;        // the last structural character ('{', '[', ',', ':'), or 'v' after a value
  // The string being read: where it starts, its length so far, and what it
  // is (for the limit's message): 'k' a key, 'v' the value of `key_`, 'e' an
  // array element.
  uint64_t string_start_ = 0;
  uint64_t string_len_ = 0;
  char string_role_ = 0;
  std::string key_;      // the last key (first 64 bytes), while its value is read
  std::string pending_;  // the key being read
};

}  // namespace shardscope::traces
