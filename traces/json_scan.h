// A strict, allocation-free JSON pull scanner for large trace files (the
// Kineto importer reads 100+ MB per second with it). It never builds a DOM:
// the reader walks objects and arrays member by member, takes strings as
// views (decoded into a scratch buffer only when they hold escapes) and
// numbers as their decimal text, and skips (while still validating) what it
// does not need. Anything that is not RFC 8259 JSON -- bad syntax, control
// characters or invalid UTF-8 in strings, bad escapes, nesting deeper than
// the limit, trailing bytes -- throws TraceError(malformed) naming the byte
// offset.
//
//   JsonScanner s(text, "trace.json");
//   s.begin_object();
//   for (bool first = true; std::string_view key = {}, s.next_member(first, &key);) ...
//
// Numbers stay text so that callers convert them exactly: parse_json_int for
// integers, decimal_to_scaled_int for microseconds -> integer nanoseconds.
//
// Streaming: a scanner built on a Source holds only a window of the text.
// The reader says where it holds no views (buffer_token, buffer_value:
// afterwards the next token or the next whole value is in the window, so
// reading it never runs past the window) and what it is done with (release:
// those bytes are dropped at the next refill). Offsets (offset(), errors)
// are always bytes from the start of the whole text, so a streaming read
// fails with the same message, at the same byte, as a read of the whole
// text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace shardscope::traces {

enum class JsonKind { object, array, string, number, boolean, null };

class JsonScanner {
 public:
  // Appends up to `n` more bytes of the text to `out`; returns how many, 0
  // at the end of the text.
  using Source = std::function<size_t(std::string& out, size_t n)>;

  // The whole text, held by the caller.
  JsonScanner(std::string_view text, const std::string& file, size_t max_depth = 64);
  // The text from `source`, after the bytes already read (`head`), asked
  // for `chunk` bytes at a time.
  JsonScanner(Source source, std::string head, const std::string& file, size_t max_depth = 64,
              size_t chunk = size_t{1} << 20);

  // Streaming only (no-ops on a whole text); they may move the window, so
  // every view taken before is invalid after them.
  // The next byte after whitespace is in the window, or the text has ended.
  void buffer_token();
  // The next value (after whitespace) is in the window whole, with the byte
  // after it, or the text has ended. Bytes that cannot be JSON end the look
  // ahead early: the reader then fails on them as on the whole text.
  void buffer_value();
  // The next object member is in the window up to the first byte of its
  // value: whitespace, ',' (unless first), the key, ':'; or the '}'.
  void buffer_member();
  // The bytes before the current position are read: the next refill drops
  // them.
  void release() { released_ = pos_; }

  // What the next value is (after whitespace); fails at the end of input or
  // on a byte that cannot start a value.
  JsonKind peek_kind();
  // Consumes '{' / '['; fails naming what was found otherwise.
  void begin_object();
  void begin_array();
  // Object members: returns false (consuming '}') at the end, else reads
  // the key and the ':' and returns true. `first` starts true; it tracks
  // whether a ',' is due. The key view is valid until the next string read.
  bool next_member(bool& first, std::string_view* key);
  // Array elements: false (consuming ']') at the end.
  bool next_element(bool& first);
  // A string value; the view is valid until the next string read.
  std::string_view string();
  // A number value as its text (JSON grammar checked).
  std::string_view number();
  bool boolean();
  void null();
  // Skips any value, validating it.
  void skip();
  // After the top-level value: only whitespace may follow.
  void finish();

  // Bytes from the start of the whole text.
  size_t offset() const { return base_ + pos_; }
  // The text from offset `from` (>= the window's start) to the current
  // position: a value just skipped. Valid until the window moves.
  std::string_view text_since(size_t from) const {
    return text_.substr(from - base_, base_ + pos_ - from);
  }
  // The most text held at once (streaming: the largest window so far).
  size_t window_peak() const { return source_ ? window_peak_ : text_.size(); }
  // `at`: bytes from the start of the window.
  [[noreturn]] void fail(size_t at, const std::string& detail) const;

 private:
  bool refill();  // false at the end of the text (or on a whole text)
  // Look-ahead for buffer_*: `at` is an offset in the whole text; each
  // returns false when the text ends first.
  bool have(size_t at);
  bool ahead_ws(size_t& at);
  bool ahead_string(size_t& at);  // at the opening quote: past the closing one
  bool ahead_value(size_t& at);   // at the value's first byte: past its end
  void skip_ws();
  std::string_view scan_string();  // at the opening quote
  void enter();
  void leave() { --depth_; }

  std::string_view text_;  // the window: buffer_ when streaming
  const std::string& file_;
  size_t pos_ = 0;       // in the window
  size_t base_ = 0;      // offset of the window's first byte in the whole text
  size_t released_ = 0;  // window bytes the next refill drops
  Source source_;        // empty: the whole text
  std::string buffer_;
  size_t chunk_ = 0;
  bool ended_ = false;  // the source has returned 0
  size_t window_peak_ = 0;
  size_t depth_ = 0;
  size_t max_depth_;
  std::string scratch_[2];  // decoded strings with escapes (alternating: key and value)
  int next_scratch_ = 0;
};

// An integer in JSON number text ("-12"); false for fractions, exponents or
// values outside int64.
bool parse_json_int(std::string_view number_text, int64_t* out);

// The decimal number `number_text` (JSON grammar: sign, digits, fraction,
// exponent) times 10^scale_exp, rounded to the nearest integer (halves away
// from zero), computed exactly from the digits, never through a double.
// False when the result does not fit in int64. Microseconds -> nanoseconds:
// decimal_to_scaled_int("1735632360000123.456", 3, &ns).
bool decimal_to_scaled_int(std::string_view number_text, int scale_exp, int64_t* out);

}  // namespace shardscope::traces
