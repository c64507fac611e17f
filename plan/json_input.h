// Reading untrusted JSON documents: policies (--policy, --set values), sweep
// grids, hardware files, Hugging Face configs and graph files. Every reader
// of such input goes through here so that each one
//  - refuses nesting deeper than kMaxJsonDepth (deeper input overflowed the
//    stack in the JSON library's recursive copy and destruction),
//  - refuses duplicate keys in an object (the JSON library keeps the last
//    silently; a policy with two "batch_size" keys is a mistake),
//  - says "is a directory" or "cannot open" for a path that is no file,
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

// `text` parsed; `what` starts every message ("--policy 'p.json'").
nlohmann::json parse_json_input(std::string_view text, const std::string& what);

// The same, but text that is not JSON at all gives nullopt (a --set value
// that is a bare string); nesting and duplicate keys still throw.
std::optional<nlohmann::json> try_parse_json_input(std::string_view text, const std::string& what);

// The file at `path` read and parsed; `what` as above (the path is added
// for file errors).
nlohmann::json load_json_input(const std::string& path, const std::string& what);

// `s` cut to kMaxQuotedInput characters, with "... (N bytes)" when cut.
std::string quote_input(std::string_view s);

}  // namespace shardscope::plan
