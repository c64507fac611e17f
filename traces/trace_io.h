// Loading and saving traces by path, whatever the form.
#pragma once

#include <string>
#include <string_view>

#include "traces/input.h"
#include "traces/trace.h"

namespace shardscope::traces {

enum class TraceFormat { binary, json, kineto };
const char* trace_format_name(TraceFormat f);  // "binary", "json", "kineto"

// Binary when the bytes start with the binary magic; native JSON when
// "format": "shardscope.trace" appears in the first 4 KiB; Kineto (PyTorch
// profiler) JSON when the text has a "traceEvents" key; else native JSON (so
// its reader reports what is wrong).
TraceFormat detect_format(std::string_view head_or_text);

// Any of the three forms (a Kineto file is imported as one rank, see
// traces/kineto_import.h), plain or gzip. Throws TraceError. The form is
// decided from the first 64 KiB; a file that is no trace fails there, and
// JSON input within `limits` (traces/input.h) or fails at the first byte
// over them. `stats`, when given, counts the bytes read (also on failure).
Trace load_trace(const std::string& path);
Trace load_trace(const std::string& path, const InputLimits& limits, InputStats* stats);

// Native JSON when the path ends in ".json", else binary. Atomic: the file
// appears complete or not at all. Throws TraceError.
void save_trace(const Trace& t, const std::string& path);
void save_trace_json(const Trace& t, const std::string& path);

}  // namespace shardscope::traces
