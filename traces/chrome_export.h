// Chrome trace / Perfetto / Kineto-compatible JSON export (mapping:
// docs/traces.md, "Chrome and Kineto export"). One process per rank
// ("rank N"), one thread per lane (host, compute, communication, copies),
// never two complete events partially overlapping on one thread (overflow
// goes to extra threads "compute (2)"), memory as counter tracks and Kineto
// "[memory]" instants, flows for dependencies, ProfilerStep#N annotations.
// Timestamps: microseconds with three decimals from a common base
// (baseTimeNanoseconds), so per-rank files line up.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "traces/trace.h"

namespace shardscope::traces {

class OutBuffer;

// Writes the ranks listed (all when empty) as one document; the top-level
// distributedInfo.rank is the first of them.
void write_chrome_trace(const Trace& t, OutBuffer& out, const std::vector<int32_t>& ranks = {});
std::string chrome_trace_string(const Trace& t, const std::vector<int32_t>& ranks = {});

// All ranks in one file (atomic).
void export_chrome(const Trace& t, const std::string& path);
// One file per rank: `dir` is a folder (created when missing) that receives
// rank<N>.json for every rank. Files are written to temporaries first and
// renamed only when all are written. Returns the paths.
std::vector<std::string> export_chrome_per_rank(const Trace& t, const std::string& dir);

// The NCCL kernel name Kineto would show for a collective of this category,
// e.g. "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)".
// `name` picks Broadcast / SendRecv / AllToAll for comm.other.
std::string nccl_kernel_name(Category c, std::string_view name);

}  // namespace shardscope::traces
