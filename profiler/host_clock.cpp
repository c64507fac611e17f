#include "profiler/host_clock.h"

#include <time.h>

namespace shardscope::profiler {

int64_t host_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

}  // namespace shardscope::profiler
