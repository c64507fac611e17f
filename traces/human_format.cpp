#include "traces/human_format.h"

#include <cmath>
#include <cstdio>

namespace shardscope::traces {

std::string human_bytes(double bytes, ByteUnit largest) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const int last = static_cast<int>(largest);
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024.0 && u < last) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", v);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return buf;
}

}  // namespace shardscope::traces
