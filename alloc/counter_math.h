// Internal to alloc/*.cpp: counter updates with peak tracking.
#pragma once

#include <cassert>
#include <cstdint>

#include "alloc/types.h"

namespace shardscope::alloc::detail {

inline void add_bytes(Counter& counter, uint64_t bytes) {
  counter.current += bytes;
  if (counter.current > counter.peak) counter.peak = counter.current;
}

inline void sub_bytes(Counter& counter, uint64_t bytes) {
  assert(counter.current >= bytes && "allocator counter underflow (logic error)");
  counter.current -= bytes;
}

}  // namespace shardscope::alloc::detail
