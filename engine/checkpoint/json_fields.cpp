#include "engine/checkpoint/json_fields.h"

#include <limits>

namespace shardscope::engine::checkpoint {

using nlohmann::json;

void fail_at(const std::string& where, const std::string& problem) {
  throw CheckpointError(where + ": " + problem);
}

json parse_json(const std::string& text, const std::string& where) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail_at(where, std::string("not valid JSON (") + e.what() + ")");
  }
}

void expect_keys(const json& j, std::initializer_list<const char*> keys, const std::string& where) {
  if (!j.is_object()) fail_at(where, std::string("expected a JSON object, got ") + j.type_name());
  for (const char* k : keys)
    if (!j.contains(k)) fail_at(where, std::string("missing key '") + k + "'");
  if (j.size() != keys.size()) {
    for (const auto& item : j.items()) {
      bool known = false;
      for (const char* k : keys) known = known || item.key() == k;
      if (!known) fail_at(where, "unknown key '" + item.key() + "'");
    }
  }
}

int64_t json_int(const json& j, const std::string& where) {
  if (!j.is_number_integer())
    fail_at(where, std::string("expected an integer, got ") + j.type_name());
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail_at(where, "integer " + std::to_string(u) + " is out of range");
    return static_cast<int64_t>(u);
  }
  return j.get<int64_t>();
}

std::string json_string(const json& j, const std::string& where) {
  if (!j.is_string()) fail_at(where, std::string("expected a string, got ") + j.type_name());
  return j.get<std::string>();
}

std::vector<int64_t> json_shape(const json& j, const std::string& where) {
  if (!j.is_array()) fail_at(where, std::string("shape: expected an array, got ") + j.type_name());
  std::vector<int64_t> shape;
  shape.reserve(j.size());
  for (const json& d : j) shape.push_back(json_int(d, where + ": shape"));
  checked_numel(shape, where);
  return shape;
}

Metadata json_metadata(const json& j, const std::string& where) {
  if (!j.is_object()) fail_at(where, std::string("expected an object, got ") + j.type_name());
  Metadata m;
  for (const auto& item : j.items())
    m[item.key()] = json_string(item.value(), where + " '" + item.key() + "'");
  return m;
}

std::string dump_json(const json& j, const std::string& where) {
  try {
    return j.dump();
  } catch (const json::exception& e) {
    fail_at(where, std::string("cannot encode as JSON (") + e.what() + ")");
  }
}

int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& where) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) fail_at(where, "shape " + shape_text(shape) + " has a negative dimension");
    if (d != 0 && n > kMaxElements / d)
      fail_at(where, "shape " + shape_text(shape) + " has more than 2^60 elements");
    n *= d;
  }
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace shardscope::engine::checkpoint
