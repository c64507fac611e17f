// Opcode layouts as in CPython's Lib/pickletools.py (nothing copied).
#include "traces/pickle_write.h"

#include <cstring>
#include <stdexcept>

#include "traces/utf8.h"

namespace shardscope::traces::pickle {

namespace {

void put_le(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

Writer::Writer() {
  out_.push_back(static_cast<char>(0x80));  // PROTO 2
  out_.push_back(2);
}

void Writer::value_written() {
  if (open_ == 0) ++top_values_;
}

void Writer::none() {
  out_.push_back('N');
  value_written();
}

void Writer::boolean(bool v) {
  out_.push_back(static_cast<char>(v ? 0x88 : 0x89));  // NEWTRUE, NEWFALSE
  value_written();
}

void Writer::integer(int64_t v) {
  if (v >= 0 && v < 256) {
    out_.push_back('K');  // BININT1
    put_le(out_, static_cast<uint64_t>(v), 1);
  } else if (v >= 0 && v < 65536) {
    out_.push_back('M');  // BININT2
    put_le(out_, static_cast<uint64_t>(v), 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out_.push_back('J');  // BININT: signed 32-bit
    put_le(out_, static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(v))), 4);
  } else {
    // LONG1: the shortest little-endian two's complement form.
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof u);
    int n = 8;
    while (n > 1) {
      const auto top = static_cast<uint8_t>(u >> (8 * (n - 1)));
      const auto next_sign = static_cast<uint8_t>((u >> (8 * (n - 2))) & 0x80);
      if ((top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0))
        --n;
      else
        break;
    }
    out_.push_back(static_cast<char>(0x8a));
    out_.push_back(static_cast<char>(n));
    put_le(out_, u, n);
  }
  value_written();
}

void Writer::real(double v) {
  out_.push_back('G');  // BINFLOAT: big-endian
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  value_written();
}

void Writer::str(std::string_view s) {
  std::string clean;
  clean.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      clean.push_back(s[i++]);
      continue;
    }
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      clean += "\xef\xbf\xbd";  // U+FFFD
      ++i;
    } else {
      clean.append(s.data() + i, n);
      i += n;
    }
  }
  if (clean.size() > UINT32_MAX) throw std::length_error("pickle: a str over 4 GiB");
  out_.push_back('X');  // BINUNICODE: u32 length, UTF-8
  put_le(out_, clean.size(), 4);
  out_ += clean;
  value_written();
}

void Writer::begin_dict() {
  out_ += "}(";  // EMPTY_DICT, MARK
  ++open_;
}

void Writer::end_dict() {
  if (open_ == 0) throw std::logic_error("pickle: end_dict without begin_dict");
  out_.push_back('u');  // SETITEMS
  --open_;
  value_written();
}

void Writer::begin_list() {
  out_ += "](";  // EMPTY_LIST, MARK
  ++open_;
}

void Writer::end_list() {
  if (open_ == 0) throw std::logic_error("pickle: end_list without begin_list");
  out_.push_back('e');  // APPENDS
  --open_;
  value_written();
}

std::string Writer::finish() {
  if (open_ != 0 || top_values_ != 1)
    throw std::logic_error("pickle: finish() with open containers or not one top-level value");
  out_.push_back('.');  // STOP
  return std::move(out_);
}

}  // namespace shardscope::traces::pickle
