// Streams a JSON document through nlohmann's callback parser so that huge
// arrays (events, traceEvents) are handled one element at a time and never
// held as a whole DOM. The handler sees every completed object and array
// together with where it sits (the path of its parents); returning false
// drops it from the document being built.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardscope::traces {

struct JsonFrame {
  bool is_array = false;
  std::string key;   // objects: the key being read
  size_t index = 0;  // arrays: index of the element being read
};

// Parents of the value being completed, outermost first. The value itself is
// parents.back()'s current key (object) or index (array).
using JsonParents = std::vector<JsonFrame>;

// "/ranks/0/events/12" for the value being completed.
std::string json_path(const JsonParents& parents);
// json_path(parents) + "/" + key
std::string json_path(const JsonParents& parents, std::string_view key);

// Handler for each completed object or array: return true to keep it in the
// parent, false to drop it.
using JsonContainerHandler = std::function<bool(const JsonParents& parents, nlohmann::json& value)>;

// Parses `text`, returns the root with dropped values removed. Throws
// TraceError(malformed) with the byte offset on syntax errors or nesting
// deeper than `max_depth`; exceptions from the handler pass through.
nlohmann::json parse_json_streaming(std::string_view text, const std::string& file,
                                    const JsonContainerHandler& on_container,
                                    size_t max_depth = 64);

// Typed field access with errors naming the JSON path (TraceError(schema)).
// `where` is the path of `obj`. Absent keys give `fallback` unless `required`.
class JsonFields {
 public:
  JsonFields(const nlohmann::json& obj, std::string where, const std::string& file);
  bool has(const char* key) const;
  int64_t get_int(const char* key, bool required, int64_t fallback = 0, int64_t lo = INT64_MIN,
                  int64_t hi = INT64_MAX) const;
  uint64_t get_uint(const char* key, bool required, uint64_t fallback = 0,
                    uint64_t hi = UINT64_MAX) const;
  double get_double(const char* key, bool required, double fallback = 0) const;
  std::string get_string(const char* key, bool required, const std::string& fallback = "") const;
  const nlohmann::json* get_array(const char* key, bool required) const;
  const nlohmann::json* get_object(const char* key, bool required) const;
  [[noreturn]] void fail(const char* key, const std::string& detail) const;
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json* find(const char* key, bool required) const;
  const nlohmann::json& obj_;
  std::string where_;
  const std::string& file_;
};

}  // namespace shardscope::traces
