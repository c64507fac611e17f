#include "traces/json_guard.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "traces/error.h"

namespace shardscope::traces {

namespace {

// Byte classes outside strings.
enum : uint8_t {
  kBad = 0,
  kSpace,   // whitespace
  kScalar,  // digits, - + . e E, and the letters of true, false, null
  kQuote,
  kOpen,   // { [
  kClose,  // } ]
  kSep,    // , :
};

constexpr std::array<uint8_t, 256> make_classes() {
  std::array<uint8_t, 256> t{};
  for (char c : {' ', '\t', '\n', '\r'}) t[static_cast<unsigned char>(c)] = kSpace;
  for (char c = '0'; c <= '9'; ++c) t[static_cast<unsigned char>(c)] = kScalar;
  for (char c : {'-', '+', '.', 'e', 'E', 't', 'r', 'u', 'f', 'a', 'l', 's', 'n'})
    t[static_cast<unsigned char>(c)] = kScalar;
  t['"'] = kQuote;
  t['{'] = kOpen;
  t['['] = kOpen;
  t['}'] = kClose;
  t[']'] = kClose;
  t[','] = kSep;
  t[':'] = kSep;
  return t;
}
constexpr std::array<uint8_t, 256> kClass = make_classes();

// Bytes a string scan stops at: the closing quote, a backslash, controls.
constexpr std::array<bool, 256> make_stops() {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = c < 0x20 || c == '"' || c == '\\';
  return t;
}
constexpr std::array<bool, 256> kStop = make_stops();

constexpr size_t kKeyShown = 64;

std::string byte_text(unsigned char c) {
  char buf[16];
  if (c >= 0x20 && c < 0x7f) {
    std::snprintf(buf, sizeof buf, "'%c'", c);
  } else {
    std::snprintf(buf, sizeof buf, "byte %02x", c);
  }
  return buf;
}

}  // namespace

JsonGuard::JsonGuard(const std::string& file, const InputLimits& limits)
    : file_(file), limits_(limits) {
  if (limits_.max_depth > 64) limits_.max_depth = 64;  // the depth bitmask
}

void JsonGuard::fail(uint64_t at, const std::string& detail) const {
  throw TraceError(ErrorKind::malformed, file_, "byte " + std::to_string(at),
                   "invalid JSON: " + detail);
}

void JsonGuard::fail_long_string() const {
  std::string what;
  if (string_role_ == 'k') {
    what = "a key";
  } else if (string_role_ == 'v') {
    what = "the value of " + quote_input(key_, kKeyShown);
  } else {
    what = "a string in an array";
  }
  throw TraceError(ErrorKind::malformed, file_,
                   "byte " + std::to_string(string_start_ + limits_.max_string_bytes),
                   what + " (starting at byte " + std::to_string(string_start_) +
                       ") is longer than the limit of " + std::to_string(limits_.max_string_bytes) +
                       " bytes for one string");
}

void JsonGuard::fail_start(const char* data, size_t n, size_t i) const {
  // load_trace's message for a file that is no trace (1-based offset).
  char bytes[64];
  const auto b = [&](size_t k) {
    return k < n ? static_cast<unsigned>(static_cast<unsigned char>(data[k])) : 0u;
  };
  std::snprintf(bytes, sizeof bytes, "%02x %02x %02x %02x", b(i), b(i + 1), b(i + 2), b(i + 3));
  throw TraceError(ErrorKind::malformed, file_, "byte " + std::to_string(offset_ + i + 1),
                   std::string("not a shardscope or Kineto trace: it starts with bytes ") + bytes +
                       ", neither the binary trace magic (\\x89SSTRC) nor a JSON object");
}

void JsonGuard::open(char c, uint64_t at) {
  if (done_) fail(at, "trailing bytes after the document");
  if (depth_ >= limits_.max_depth)
    fail(at, "nesting deeper than " + std::to_string(limits_.max_depth) + " levels");
  if (c == '{') {
    objects_ |= uint64_t{1} << depth_;
  } else {
    objects_ &= ~(uint64_t{1} << depth_);
  }
  ++depth_;
  started_ = true;
  last_ = c;
}

void JsonGuard::close(char c, uint64_t at) {
  if (depth_ == 0) fail(at, std::string("unexpected '") + c + "'");
  const bool object = (objects_ >> (depth_ - 1)) & 1;
  if (object != (c == '}'))
    fail(at, std::string("'") + c + "' closes " + (object ? "an object" : "an array"));
  if (--depth_ == 0) done_ = true;
  last_ = 'v';
}

void JsonGuard::feed(const char* data, size_t n) {
  const auto* u = reinterpret_cast<const unsigned char*>(data);
  size_t i = 0;
  while (i < n) {
    if (in_string_) {
      if (escape_) {  // the byte after a backslash (the reader checks it)
        escape_ = false;
        ++string_len_;
        ++i;
      }
      const size_t from = i;
      while (i < n && !kStop[u[i]]) ++i;
      if (string_role_ == 'k' && pending_.size() < kKeyShown)
        pending_.append(data + from, std::min(i - from, kKeyShown - pending_.size()));
      string_len_ += i - from;
      if (string_len_ > limits_.max_string_bytes) fail_long_string();
      if (i == n) break;
      const unsigned char c = u[i];
      if (c == '"') {
        in_string_ = false;
        if (string_role_ == 'k') key_.swap(pending_);
        last_ = 'v';
      } else if (c == '\\') {
        escape_ = true;
        ++string_len_;
      } else {
        fail(offset_ + i, "control character in a string");
      }
      ++i;
      continue;
    }
    // Inside a container: whitespace and scalars run fast.
    if (depth_ > 0) {
      const size_t from = i;
      while (i < n && (kClass[u[i]] == kSpace || kClass[u[i]] == kScalar)) ++i;
      if (i > from && kClass[u[i - 1]] == kScalar) last_ = 'v';
      if (i == n) break;
    }
    const unsigned char c = u[i];
    switch (kClass[c]) {
      case kSpace:
        break;
      case kQuote:
        if (depth_ == 0) {
          if (!started_) fail_start(data, n, i);
          fail(offset_ + i, "trailing bytes after the document");
        }
        in_string_ = true;
        string_start_ = offset_ + i;
        string_len_ = 0;
        if (last_ == ':') {
          string_role_ = 'v';
        } else if ((objects_ >> (depth_ - 1)) & 1) {
          string_role_ = 'k';
          pending_.clear();
        } else {
          string_role_ = 'e';
        }
        break;
      case kOpen:
        open(static_cast<char>(c), offset_ + i);
        break;
      case kClose:
        if (!started_) fail_start(data, n, i);
        close(static_cast<char>(c), offset_ + i);
        break;
      case kSep:
      case kScalar:  // only reached at depth 0 (inside, the fast loop takes them)
        if (!started_) fail_start(data, n, i);
        if (depth_ == 0) fail(offset_ + i, "trailing bytes after the document");
        last_ = static_cast<char>(c);
        break;
      default:
        if (!started_) fail_start(data, n, i);
        if (done_) fail(offset_ + i, "trailing bytes after the document");
        fail(offset_ + i, "unexpected " + byte_text(c) + " outside a string");
    }
    ++i;
  }
  offset_ += n;
}

void JsonGuard::finish() const {
  if (!started_)
    throw TraceError(ErrorKind::malformed, file_, "byte 1",
                     offset_ == 0 ? "empty file: not a shardscope or Kineto trace"
                                  : "only whitespace: not a shardscope or Kineto trace");
}

}  // namespace shardscope::traces
