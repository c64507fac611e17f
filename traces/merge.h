// Merging per-rank traces into one (the engine's launcher: each rank records
// its own trace on its own clock; rank 0 merges them).
#pragma once

#include <cstdint>

#include "traces/trace.h"

namespace shardscope::traces {

// Appends every rank of `from` to `into`, re-interning strings and adding
// `clock_offset_ns` to all its times (RankTrace::clock_offset_ns records it).
// Throws std::invalid_argument when a rank is already in `into`.
void merge_ranks(Trace& into, const Trace& from, int64_t clock_offset_ns = 0);

}  // namespace shardscope::traces
