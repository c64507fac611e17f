// The compact binary form of a trace, for large traces (layout:
// docs/traces.md, "Binary form"). Little-endian; the event, memory, flow and
// step arrays are stored exactly as their in-memory structs (layouts pinned
// by static_asserts), so loading is a bounded read plus one validation pass.
// Every section carries an XXH64 checksum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "traces/trace.h"

namespace shardscope::traces {

// Version 2 added Category::host (host-side events of imported profiler
// traces); version 1 files read unchanged (their categories are a subset).
constexpr uint32_t kBinaryVersion = 2;
constexpr uint32_t kOldestBinaryVersion = 1;
// First 8 bytes of every binary trace: \x89 S S T R C \r \n (PNG-style: a
// high byte and a CR LF catch text-mode transfers).
constexpr char kBinaryMagic[8] = {'\x89', 'S', 'S', 'T', 'R', 'C', '\r', '\n'};

// What the binary form can hold, per rank: events, memory records, flows,
// steps, lanes and represented ranks at most 2^32 - 1 each (flows index a
// rank's events, and RANK stores the represents count, with 32 bits); one
// string at most 2^32 - 1 bytes (u32 lengths). The writers check them first.
constexpr uint64_t kBinaryMaxPerRank = UINT32_MAX;
constexpr uint64_t kBinaryMaxStringBytes = UINT32_MAX;
// TraceError(schema) at `position` naming the limit when `count` of `what`
// ("events of rank 3") exceeds `limit`; the writers' check, exposed for tests.
void check_binary_limit(const std::string& file, const std::string& position,
                        const std::string& what, uint64_t count, uint64_t limit);

// Writes atomically (temp file + rename). TraceError(schema) on an
// inconsistent trace, TraceError(io) on I/O failure.
void write_trace_binary(const Trace& t, const std::string& path);
std::string trace_to_binary(const Trace& t);

// Throws TraceError naming the byte offset: truncated, malformed, checksum,
// unsupported_version; schema for references out of range. Counts are checked
// against the bytes left before anything is allocated.
Trace read_trace_binary(const std::string& path);
Trace read_trace_binary(const void* data, size_t size, const std::string& name = "trace.bin");

}  // namespace shardscope::traces
