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
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardscope::traces {

enum class JsonKind { object, array, string, number, boolean, null };

class JsonScanner {
 public:
  JsonScanner(std::string_view text, const std::string& file, size_t max_depth = 64);

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

  size_t offset() const { return pos_; }
  std::string_view text() const { return text_; }
  [[noreturn]] void fail(size_t at, const std::string& detail) const;

 private:
  void skip_ws();
  std::string_view scan_string();  // at the opening quote
  void enter();
  void leave() { --depth_; }

  std::string_view text_;
  const std::string& file_;
  size_t pos_ = 0;
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
