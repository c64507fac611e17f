// The native JSON form of a trace (schema: docs/traces.md, "Native JSON").
// Human-readable and diffable; traces/binary_format.h is the compact form
// for large traces. Strings must be UTF-8: invalid bytes are written as
// U+FFFD (the binary form keeps any bytes).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "traces/trace.h"

namespace shardscope::traces {

constexpr const char* kJsonFormatName = "shardscope.trace";
constexpr int kJsonFormatVersion = 1;

class OutBuffer;

// Writes `t` (validated first: TraceError(schema) on an inconsistent trace).
void write_trace_json(const Trace& t, OutBuffer& out);
std::string trace_to_json(const Trace& t);

// Parses the native JSON form. Throws TraceError: malformed (with the byte
// offset), schema (with the JSON path), unsupported_version.
Trace read_trace_json(std::string_view text, const std::string& file = "trace.json");

// Shared with the binary form, which stores the metadata as this JSON object.
void write_metadata_json(const Metadata& m, OutBuffer& out);
// `where` is the JSON path of the object (for errors).
Metadata read_metadata_json(const nlohmann::json& obj, const std::string& where,
                            const std::string& file);

// Shared with the Chrome export, which writes them in an event's args: the
// optional event fields ,"unit":..,"op":..,"bytes":..,"flops":.. (those set,
// in that order). `blank_controls` as OutBuffer::put_string.
void write_event_fields_json(const Trace& t, const Event& e, OutBuffer& out, bool blank_controls);

}  // namespace shardscope::traces
