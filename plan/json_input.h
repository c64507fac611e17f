// Reading untrusted JSON documents: policies (--policy, --set values), sweep
// grids, hardware files, Hugging Face configs and graph files. Every reader
// of such input goes through here so that each one
//  - refuses nesting deeper than kMaxJsonDepth (deeper input overflowed the
//    stack in the JSON library's recursive copy and destruction),
//  - refuses duplicate keys in an object (the JSON library keeps the last
//    silently; a policy with two "batch_size" keys is a mistake),
//  - says "is a directory" or "cannot open" for a path that is no file,
//  - reads at most a cap of bytes from a file (kMaxJsonFileBytes; model and
//    graph files kMaxModelFileBytes), refusing a larger one by its size
//    before reading it, and never holding more than the cap of it (a 1 GB
//    file of whitespace, or /dev/zero, costs no more than the cap),
//  - quotes at most kMaxQuotedInput characters of the input in a message.
// Errors are plan::Error naming `what` (the flag or file) and the place.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace shardscope::plan {

constexpr int kMaxJsonDepth = 128;
constexpr size_t kMaxQuotedInput = 200;
// Policies, sweep grids, hardware files and Hugging Face configs are a few KB
// (the largest published config.json files are under 100 KB).
constexpr size_t kMaxJsonFileBytes = size_t{64} << 20;  // 64 MiB
// Model files may be graph JSON (plan --graph-out): about 1 KB per graph op,
// so a graph at kMaxGraphOps (plan/model_limits.h) is about 135 MB.
constexpr size_t kMaxModelFileBytes = size_t{256} << 20;  // 256 MiB

// `text` parsed; `what` starts every message ("--policy 'p.json'").
nlohmann::json parse_json_input(std::string_view text, const std::string& what);

// The same, but text that is not JSON at all gives nullopt (a --set value
// that is a bare string); nesting and duplicate keys still throw.
std::optional<nlohmann::json> try_parse_json_input(std::string_view text, const std::string& what);

// The file at `path` read and parsed; `what` as above (the path is added
// for file errors). At most kMaxJsonFileBytes.
nlohmann::json load_json_input(const std::string& path, const std::string& what);

// The bytes of the file at `path`, at most `max_bytes` of them: a larger file
// is refused as "<what>: '<path>' is N bytes, over the limit of M bytes (X MiB)"
// ("(X MiB)" when M is a whole number of MiB)
// (N is "more than M" when the size is not known in advance: a pipe, a
// device). Errors for a directory or an unopenable path as above.
std::string read_input_file(const std::string& path, const std::string& what, size_t max_bytes);

// `s` cut to kMaxQuotedInput characters, with "... (N bytes)" when cut.
std::string quote_input(std::string_view s);

}  // namespace shardscope::plan
