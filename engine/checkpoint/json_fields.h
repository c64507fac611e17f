// Strict accessors for the JSON parts of the checkpoint formats. Every failure is a
// CheckpointError "<where>: <problem>", where `where` names the file and the field
// ("/ckpt/index.json: rank 1 slice 0 'wte.weight'").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint.h"

namespace shardscope::engine::checkpoint {

// Largest element count of one tensor: numel * 4 bytes must fit in int64 with room.
constexpr int64_t kMaxElements = int64_t{1} << 60;

[[noreturn]] void fail_at(const std::string& where, const std::string& problem);

// Parses `text` as JSON; a syntax error names `where`.
nlohmann::json parse_json(const std::string& text, const std::string& where);
// `j` is an object whose keys are exactly `keys`.
void expect_keys(const nlohmann::json& j, std::initializer_list<const char*> keys,
                 const std::string& where);
int64_t json_int(const nlohmann::json& j, const std::string& where);
std::string json_string(const nlohmann::json& j, const std::string& where);
// Array of dimensions >= 0 whose product is at most kMaxElements.
std::vector<int64_t> json_shape(const nlohmann::json& j, const std::string& where);
// Object of string -> string.
Metadata json_metadata(const nlohmann::json& j, const std::string& where);
// dump() that turns invalid UTF-8 into a CheckpointError naming `where`.
std::string dump_json(const nlohmann::json& j, const std::string& where);

// Product of the dimensions; fails when a dimension is negative or the product
// exceeds kMaxElements. A rank-0 shape has one element.
int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& where);
std::string shape_text(const std::vector<int64_t>& shape);  // "[2, 3]"

}  // namespace shardscope::engine::checkpoint
