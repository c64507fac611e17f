#include "traces/json_scan.h"

#include <array>

#include "traces/error.h"
#include "traces/utf8.h"

namespace shardscope::traces {

namespace {

// Bytes a string scan stops at: '"', '\\', control characters, non-ASCII.
constexpr std::array<bool, 256> make_string_stops() {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = c < 0x20 || c == '"' || c == '\\' || c >= 0x80;
  return t;
}
constexpr std::array<bool, 256> kStringStop = make_string_stops();

// The look-ahead's stops: in a string, '"' and '\\'; outside, '"' and
// brackets.
constexpr std::array<bool, 256> make_table(std::string_view bytes) {
  std::array<bool, 256> t{};
  for (char c : bytes) t[static_cast<unsigned char>(c)] = true;
  return t;
}
constexpr std::array<bool, 256> kQuoteOrEscape = make_table("\"\\");
constexpr std::array<bool, 256> kStructure = make_table("\"{}[]");

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

void put_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

JsonScanner::JsonScanner(std::string_view text, const std::string& file, size_t max_depth)
    : text_(text), file_(file), max_depth_(max_depth) {}

JsonScanner::JsonScanner(Source source, std::string head, const std::string& file, size_t max_depth,
                         size_t chunk)
    : file_(file),
      source_(std::move(source)),
      buffer_(std::move(head)),
      chunk_(chunk < 1 ? 1 : chunk),
      max_depth_(max_depth) {
  text_ = buffer_;
  window_peak_ = buffer_.size();
}

void JsonScanner::fail(size_t at, const std::string& detail) const {
  throw TraceError(ErrorKind::malformed, file_, "byte " + std::to_string(base_ + at),
                   "invalid JSON: " + detail);
}

bool JsonScanner::refill() {
  if (!source_ || ended_) return false;
  if (released_ > 0) {
    // The window keeps what is not released yet: the tail of the current
    // value, a chunk at most once values are released one by one.
    buffer_.erase(0, released_);
    base_ += released_;
    pos_ -= released_;
    released_ = 0;
  }
  const size_t n = source_(buffer_, chunk_);
  if (n == 0) ended_ = true;
  text_ = buffer_;
  if (buffer_.size() > window_peak_) window_peak_ = buffer_.size();
  return n > 0;
}

bool JsonScanner::have(size_t at) {
  while (at - base_ >= text_.size())
    if (!refill()) return false;
  return true;
}

bool JsonScanner::ahead_ws(size_t& at) {
  while (have(at)) {
    const char c = text_[at - base_];
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return true;
    ++at;
  }
  return false;
}

bool JsonScanner::ahead_string(size_t& at) {
  ++at;  // the opening quote
  while (have(at)) {
    // Within the window: to the next quote or backslash.
    const char* p = text_.data() + (at - base_);
    const char* end = text_.data() + text_.size();
    while (p < end && *p != '"' && *p != '\\') ++p;
    at = base_ + static_cast<size_t>(p - text_.data());
    if (p == end) continue;
    if (*p == '"') {
      ++at;
      return true;
    }
    at += 2;  // an escape: its next byte cannot end the string
  }
  return false;
}

bool JsonScanner::ahead_value(size_t& at) {
  if (!have(at)) return false;
  const char first = text_[at - base_];
  if (first == '"') return ahead_string(at);
  if (first != '{' && first != '[') {
    // A number or literal: to the first byte that cannot continue it.
    while (have(at)) {
      const char c = text_[at - base_];
      if (!(is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
            c == '+' || c == '.'))
        return true;
      ++at;
    }
    return false;
  }
  // A container: brackets counted outside strings, to the matching close.
  // (Mismatched brackets end it too: the reader fails there.) Tight loops
  // within the window; `at` carries the position across refills.
  size_t depth = 0;
  bool in_string = false;
  while (have(at)) {
    const auto* u = reinterpret_cast<const unsigned char*>(text_.data());
    const size_t end = text_.size();
    size_t i = at - base_;
    while (i < end) {
      if (in_string) {
        while (i < end && !kQuoteOrEscape[u[i]]) ++i;
        if (i >= end) break;
        if (u[i] == '\\') {
          i += 2;  // an escape: its next byte cannot end the string
          continue;
        }
        in_string = false;
        ++i;
        continue;
      }
      const unsigned char c = u[i++];
      if (!kStructure[c]) continue;
      if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (--depth == 0) {  // '}' or ']'
        at = base_ + i;
        return true;
      }
    }
    at = base_ + i;  // past the window (by one after an escape): have() refills
  }
  return false;
}

void JsonScanner::buffer_token() {
  if (!source_) return;
  size_t at = base_ + pos_;
  ahead_ws(at);
}

void JsonScanner::buffer_value() {
  if (!source_ || ended_) return;
  size_t at = base_ + pos_;
  if (ahead_ws(at) && ahead_value(at)) have(at);  // and the byte after it
}

void JsonScanner::buffer_member() {
  if (!source_ || ended_) return;
  size_t at = base_ + pos_;
  if (!ahead_ws(at)) return;
  if (text_[at - base_] == ',') {
    ++at;
    if (!ahead_ws(at)) return;
  }
  if (text_[at - base_] != '"' || !ahead_string(at) || !ahead_ws(at)) return;
  if (text_[at - base_] == ':') {
    ++at;
    ahead_ws(at);
  }
}

void JsonScanner::skip_ws() {
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return;
    ++pos_;
  }
}

JsonKind JsonScanner::peek_kind() {
  skip_ws();
  if (pos_ >= text_.size()) fail(pos_, "unexpected end of input, expected a value");
  switch (text_[pos_]) {
    case '{':
      return JsonKind::object;
    case '[':
      return JsonKind::array;
    case '"':
      return JsonKind::string;
    case 't':
    case 'f':
      return JsonKind::boolean;
    case 'n':
      return JsonKind::null;
    default:
      if (text_[pos_] == '-' || is_digit(text_[pos_])) return JsonKind::number;
  }
  fail(pos_, "unexpected character " + quote_input(text_.substr(pos_, 1)) + ", expected a value");
}

void JsonScanner::enter() {
  if (++depth_ > max_depth_)
    fail(pos_, "nesting deeper than " + std::to_string(max_depth_) + " levels");
}

void JsonScanner::begin_object() {
  if (peek_kind() != JsonKind::object) fail(pos_, "expected an object");
  ++pos_;
  enter();
}

void JsonScanner::begin_array() {
  if (peek_kind() != JsonKind::array) fail(pos_, "expected an array");
  ++pos_;
  enter();
}

bool JsonScanner::next_member(bool& first, std::string_view* key) {
  skip_ws();
  if (pos_ >= text_.size()) fail(pos_, "unexpected end of input in an object");
  if (text_[pos_] == '}') {
    ++pos_;
    leave();
    return false;
  }
  if (!first) {
    if (text_[pos_] != ',') fail(pos_, "expected ',' or '}' in an object");
    ++pos_;
    skip_ws();
  }
  first = false;
  if (pos_ >= text_.size() || text_[pos_] != '"') fail(pos_, "expected a string key");
  *key = scan_string();
  skip_ws();
  if (pos_ >= text_.size() || text_[pos_] != ':') fail(pos_, "expected ':' after a key");
  ++pos_;
  return true;
}

bool JsonScanner::next_element(bool& first) {
  skip_ws();
  if (pos_ >= text_.size()) fail(pos_, "unexpected end of input in an array");
  if (text_[pos_] == ']') {
    ++pos_;
    leave();
    return false;
  }
  if (!first) {
    if (text_[pos_] != ',') fail(pos_, "expected ',' or ']' in an array");
    ++pos_;
  }
  first = false;
  return true;
}

std::string_view JsonScanner::string() {
  if (peek_kind() != JsonKind::string) fail(pos_, "expected a string");
  return scan_string();
}

std::string_view JsonScanner::scan_string() {
  const size_t open = pos_++;
  const size_t start = pos_;
  // Fast path: no escapes.
  while (pos_ < text_.size()) {
    const auto c = static_cast<unsigned char>(text_[pos_]);
    if (!kStringStop[c]) {
      ++pos_;
      continue;
    }
    if (c == '"') {
      ++pos_;
      return text_.substr(start, pos_ - 1 - start);
    }
    if (c >= 0x80) {
      const size_t n = utf8_sequence_length(text_, pos_);
      if (n == 0) fail(pos_, "invalid UTF-8 in a string");
      pos_ += n;
      continue;
    }
    if (c == '\\') break;
    fail(pos_, "control character U+00" + std::string(1, "0123456789abcdef"[c >> 4]) +
                   std::string(1, "0123456789abcdef"[c & 15]) + " in a string");
  }
  if (pos_ >= text_.size()) fail(open, "unterminated string");
  // Slow path: decode escapes into a scratch buffer.
  std::string& out = scratch_[next_scratch_];
  next_scratch_ ^= 1;
  out.assign(text_.data() + start, pos_ - start);
  while (pos_ < text_.size()) {
    const auto c = static_cast<unsigned char>(text_[pos_]);
    if (c == '"') {
      ++pos_;
      return out;
    }
    if (c >= 0x80) {
      const size_t n = utf8_sequence_length(text_, pos_);
      if (n == 0) fail(pos_, "invalid UTF-8 in a string");
      out.append(text_.data() + pos_, n);
      pos_ += n;
      continue;
    }
    if (c < 0x20) fail(pos_, "control character in a string");
    if (c != '\\') {
      out.push_back(static_cast<char>(c));
      ++pos_;
      continue;
    }
    if (pos_ + 1 >= text_.size()) fail(pos_, "unterminated escape");
    const char e = text_[pos_ + 1];
    pos_ += 2;
    switch (e) {
      case '"':
      case '\\':
      case '/':
        out.push_back(e);
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'u': {
        auto hex4 = [&](size_t at) -> uint32_t {
          if (at + 4 > text_.size()) fail(at, "truncated \\u escape");
          uint32_t v = 0;
          for (size_t k = 0; k < 4; ++k) {
            const int h = hex_value(text_[at + k]);
            if (h < 0) fail(at + k, "bad hex digit in a \\u escape");
            v = v * 16 + static_cast<uint32_t>(h);
          }
          return v;
        };
        uint32_t cp = hex4(pos_);
        pos_ += 4;
        if (cp >= 0xdc00 && cp <= 0xdfff) fail(pos_ - 6, "unpaired low surrogate");
        if (cp >= 0xd800 && cp <= 0xdbff) {
          if (pos_ + 2 > text_.size() || text_[pos_] != '\\' || text_[pos_ + 1] != 'u')
            fail(pos_, "unpaired high surrogate");
          const uint32_t low = hex4(pos_ + 2);
          if (low < 0xdc00 || low > 0xdfff) fail(pos_, "unpaired high surrogate");
          pos_ += 6;
          cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        }
        put_utf8(out, cp);
        break;
      }
      default:
        fail(pos_ - 1, std::string("invalid escape '\\") + e + "'");
    }
  }
  fail(open, "unterminated string");
}

std::string_view JsonScanner::number() {
  if (peek_kind() != JsonKind::number) fail(pos_, "expected a number");
  const size_t start = pos_;
  auto digits = [&]() {
    const size_t from = pos_;
    while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
    return pos_ - from;
  };
  if (text_[pos_] == '-') ++pos_;
  if (pos_ < text_.size() && text_[pos_] == '0') {
    ++pos_;
  } else if (digits() == 0) {
    fail(pos_, "expected digits in a number");
  }
  if (pos_ < text_.size() && text_[pos_] == '.') {
    ++pos_;
    if (digits() == 0) fail(pos_, "expected digits after '.'");
  }
  if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    ++pos_;
    if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
    if (digits() == 0) fail(pos_, "expected digits in an exponent");
  }
  return text_.substr(start, pos_ - start);
}

bool JsonScanner::boolean() {
  if (peek_kind() != JsonKind::boolean) fail(pos_, "expected true or false");
  if (text_.substr(pos_, 4) == "true") {
    pos_ += 4;
    return true;
  }
  if (text_.substr(pos_, 5) == "false") {
    pos_ += 5;
    return false;
  }
  fail(pos_, "invalid literal");
}

void JsonScanner::null() {
  if (peek_kind() != JsonKind::null || text_.substr(pos_, 4) != "null")
    fail(pos_, "invalid literal");
  pos_ += 4;
}

void JsonScanner::skip() {
  switch (peek_kind()) {
    case JsonKind::object: {
      begin_object();
      std::string_view key;
      for (bool first = true; next_member(first, &key);) skip();
      return;
    }
    case JsonKind::array: {
      begin_array();
      for (bool first = true; next_element(first);) skip();
      return;
    }
    case JsonKind::string:
      scan_string();
      return;
    case JsonKind::number:
      number();
      return;
    case JsonKind::boolean:
      boolean();
      return;
    case JsonKind::null:
      null();
      return;
  }
}

void JsonScanner::finish() {
  skip_ws();
  while (pos_ == text_.size() && source_) {
    release();  // whitespace only so far
    if (!refill()) break;
    skip_ws();
  }
  if (pos_ != text_.size()) fail(pos_, "trailing bytes after the document");
}

bool parse_json_int(std::string_view s, int64_t* out) {
  size_t i = 0;
  const bool negative = !s.empty() && s[0] == '-';
  if (negative) ++i;
  if (i >= s.size()) return false;
  uint64_t v = 0;
  for (; i < s.size(); ++i) {
    if (!is_digit(s[i])) return false;
    const auto d = static_cast<uint64_t>(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  if (negative) {
    if (v > static_cast<uint64_t>(INT64_MAX) + 1) return false;
    *out = v == static_cast<uint64_t>(INT64_MAX) + 1 ? INT64_MIN : -static_cast<int64_t>(v);
  } else {
    if (v > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(v);
  }
  return true;
}

bool decimal_to_scaled_int(std::string_view s, int scale_exp, int64_t* out) {
  // value = digits * 10^exp10; the digits are every mantissa digit, leading
  // zeros dropped, at most 19 significant kept (the rest only round).
  size_t i = 0;
  const bool negative = !s.empty() && s[0] == '-';
  if (negative) ++i;
  uint64_t digits = 0;
  int kept = 0;
  int64_t exp10 = scale_exp;
  int first_dropped = -1;  // the first digit not kept (rounding), -1 = none
  bool seen_digit = false;
  auto take = [&](char c, bool fraction) {
    const int d = c - '0';
    seen_digit = true;
    if (kept == 0 && d == 0) {
      if (fraction) --exp10;
      return;
    }
    if (kept < 19) {
      digits = digits * 10 + static_cast<uint64_t>(d);
      ++kept;
      if (fraction) --exp10;
    } else {
      if (first_dropped < 0) first_dropped = d;
      if (!fraction) ++exp10;
    }
  };
  for (; i < s.size() && is_digit(s[i]); ++i) take(s[i], false);
  if (i < s.size() && s[i] == '.')
    for (++i; i < s.size() && is_digit(s[i]); ++i) take(s[i], true);
  if (!seen_digit) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool exp_negative = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) exp_negative = s[i++] == '-';
    int64_t e = 0;
    bool any = false;
    for (; i < s.size() && is_digit(s[i]); ++i) {
      any = true;
      if (e < 100000) e = e * 10 + (s[i] - '0');
    }
    if (!any) return false;
    exp10 += exp_negative ? -e : e;
  }
  if (i != s.size()) return false;
  if (digits == 0) {
    *out = 0;
    return true;
  }
  // value = digits * 10^exp10 (+ the dropped digits, below the last kept
  // one). Rounding looks at the most significant discarded digit only
  // (halves away from zero).
  __extension__ typedef unsigned __int128 u128;
  u128 v = digits;
  const u128 limit = static_cast<u128>(INT64_MAX) + (negative ? 1 : 0);
  if (exp10 >= 0) {
    // With 19 kept digits (>= 10^18) any exp10 > 0 overflows, so dropped
    // digits only round when exp10 == 0.
    for (int64_t k = 0; k < exp10; ++k) {
      v *= 10;
      if (v > limit) return false;
    }
    if (first_dropped >= 5) ++v;
  } else {
    int round_digit = 0;
    for (int64_t k = 0; k < -exp10 && k < 40; ++k) {
      round_digit = static_cast<int>(v % 10);
      v /= 10;
    }
    if (-exp10 > 40) round_digit = 0;  // the value was < 10^38: far below one unit
    if (round_digit >= 5) ++v;
  }
  if (v > limit) return false;
  const auto mag = static_cast<uint64_t>(v);
  if (negative) {
    *out = mag == static_cast<uint64_t>(INT64_MAX) + 1 ? INT64_MIN : -static_cast<int64_t>(mag);
  } else {
    *out = static_cast<int64_t>(mag);
  }
  return true;
}

}  // namespace shardscope::traces
