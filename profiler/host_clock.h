// Host clock used by every recorder: CLOCK_MONOTONIC in integer nanoseconds.
// CUPTI timestamps are converted onto this clock so that host and device
// events of one process share a time axis.
#pragma once

#include <cstdint>

namespace shardscope::profiler {
int64_t host_now_ns();
}  // namespace shardscope::profiler
