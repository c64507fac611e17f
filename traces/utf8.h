// UTF-8 validation shared by the writers (file_io's put_string, which
// replaces invalid bytes) and the JSON scanner (which refuses them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace shardscope::traces {

// Length of the valid UTF-8 sequence at s[i], or 0 when invalid (overlong
// forms, surrogates and code points above U+10FFFF are invalid).
inline size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  uint32_t min = 0;
  uint32_t cp = 0;
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    n = 2;
    min = 0x80;
    cp = b0 & 0x1f;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    n = 3;
    min = 0x800;
    cp = b0 & 0x0f;
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    n = 4;
    min = 0x10000;
    cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

}  // namespace shardscope::traces
