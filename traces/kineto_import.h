// Imports PyTorch profiler (Kineto) Chrome traces, one file per rank, into
// the trace model (mapping: docs/traces.md, "Kineto import"): GPU kernels,
// memcpy and memset on their streams, NCCL kernels classified by collective,
// "[memory]" instants (device memory) into memory records, ProfilerStep#N
// annotations into steps, the rank from distributedInfo.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "traces/trace.h"

namespace shardscope::traces {

// Each file is one rank (distributedInfo.rank, else its position in `paths`).
// Throws TraceError naming the file and the JSON path (/traceEvents/12/ts).
Trace import_kineto(const std::vector<std::string>& paths);

// One Kineto document already in memory.
Trace import_kineto_text(std::string_view text, const std::string& name = "kineto.json");

// Adds the rank in `text` to `t` (rank `fallback_rank` when the document has
// no distributedInfo.rank). Returns the world size it names, or 0.
int32_t import_kineto_rank(Trace& t, std::string_view text, const std::string& name,
                           int32_t fallback_rank);

}  // namespace shardscope::traces
