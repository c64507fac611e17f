#include "traces/json_stream.h"

#include <cmath>

#include "traces/error.h"

namespace shardscope::traces {

using nlohmann::json;

namespace {

// Bytes of one key shown in a JSON path (a path has at most 64 of them).
constexpr size_t kMaxPathKey = 64;

}  // namespace

std::string json_path(const JsonParents& parents) {
  std::string p;
  for (const JsonFrame& f : parents) {
    p += '/';
    p += f.is_array ? std::to_string(f.index) : clip_input(f.key, kMaxPathKey);
  }
  return p.empty() ? "/" : p;
}

std::string json_path(const JsonParents& parents, std::string_view key) {
  std::string p = json_path(parents);
  if (p != "/") p += '/';
  p += clip_input(key, kMaxPathKey);
  return p;
}

json parse_json_streaming(std::string_view text, const std::string& file,
                          const JsonContainerHandler& on_container, size_t max_depth) {
  JsonParents stack;
  auto advance_parent = [&stack]() {
    if (!stack.empty() && stack.back().is_array) ++stack.back().index;
  };
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: {
        if (stack.size() >= max_depth)
          throw TraceError(ErrorKind::malformed, file, json_path(stack),
                           "nesting deeper than " + std::to_string(max_depth) + " levels");
        JsonFrame f;
        f.is_array = event == json::parse_event_t::array_start;
        stack.push_back(std::move(f));
        return true;
      }
      case json::parse_event_t::key:
        if (!stack.empty()) stack.back().key = parsed.get_ref<const std::string&>();
        return true;
      case json::parse_event_t::value:
        advance_parent();
        return true;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end: {
        if (!stack.empty()) stack.pop_back();
        const bool keep = on_container(stack, parsed);
        advance_parent();
        return keep;
      }
    }
    return true;
  };
  // nlohmann's lexer ends the input at a raw NUL byte, so a document followed
  // by NULs and anything else would read; the JSON guard (json_guard.h), which
  // load_trace runs on the same text, refuses them. A raw NUL is never valid
  // JSON (in a string it must be escaped), so it is refused here, at its byte
  // offset from the start (0-based, as the guard counts).
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    throw TraceError(ErrorKind::malformed, file, "byte " + std::to_string(nul),
                     "invalid JSON: a NUL byte (never valid in JSON text)");
  try {
    return json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true);
  } catch (const json::parse_error& e) {
    throw TraceError(ErrorKind::malformed, file, "byte " + std::to_string(e.byte),
                     "invalid JSON: " + clip_input(e.what()));
  } catch (const json::exception& e) {
    // e.g. out_of_range 406: a number too large for a double ("1e400").
    throw TraceError(ErrorKind::malformed, file, "", "invalid JSON: " + clip_input(e.what()));
  }
}

// ---- JsonFields -------------------------------------------------------------------

JsonFields::JsonFields(const json& obj, std::string where, const std::string& file)
    : obj_(obj), where_(std::move(where)), file_(file) {
  if (!obj_.is_object()) throw TraceError(ErrorKind::schema, file_, where_, "expected an object");
}

void JsonFields::fail(const char* key, const std::string& detail) const {
  std::string p = where_;
  if (key) {
    if (p != "/") p += '/';
    p += clip_input(key, kMaxPathKey);
  }
  throw TraceError(ErrorKind::schema, file_, p, detail);
}

const json* JsonFields::find(const char* key, bool required) const {
  auto it = obj_.find(key);
  if (it == obj_.end()) {
    if (required) fail(key, "missing");
    return nullptr;
  }
  return &*it;
}

bool JsonFields::has(const char* key) const {
  return obj_.find(key) != obj_.end();
}

int64_t JsonFields::get_int(const char* key, bool required, int64_t fallback, int64_t lo,
                            int64_t hi) const {
  const json* v = find(key, required);
  if (!v) return fallback;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const auto u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) fail(key, "integer out of range");
    x = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else {
    fail(key, std::string("expected an integer, got ") + v->type_name());
  }
  if (x < lo || x > hi)
    fail(key, std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) +
                  "]");
  return x;
}

uint64_t JsonFields::get_uint(const char* key, bool required, uint64_t fallback,
                              uint64_t hi) const {
  const json* v = find(key, required);
  if (!v) return fallback;
  uint64_t x = 0;
  if (v->is_number_unsigned()) {
    x = v->get<uint64_t>();
  } else if (v->is_number_integer()) {
    const auto s = v->get<int64_t>();
    if (s < 0) fail(key, "expected a non-negative integer, got " + std::to_string(s));
    x = static_cast<uint64_t>(s);
  } else {
    fail(key, std::string("expected a non-negative integer, got ") + v->type_name());
  }
  if (x > hi) fail(key, std::to_string(x) + " is larger than " + std::to_string(hi));
  return x;
}

double JsonFields::get_double(const char* key, bool required, double fallback) const {
  const json* v = find(key, required);
  if (!v) return fallback;
  if (!v->is_number()) fail(key, std::string("expected a number, got ") + v->type_name());
  const double x = v->get<double>();
  if (!std::isfinite(x)) fail(key, "not a finite number");
  return x;
}

std::string JsonFields::get_string(const char* key, bool required,
                                   const std::string& fallback) const {
  const json* v = find(key, required);
  if (!v) return fallback;
  if (!v->is_string()) fail(key, std::string("expected a string, got ") + v->type_name());
  return v->get<std::string>();
}

const json* JsonFields::get_array(const char* key, bool required) const {
  const json* v = find(key, required);
  if (v && !v->is_array()) fail(key, std::string("expected an array, got ") + v->type_name());
  return v;
}

const json* JsonFields::get_object(const char* key, bool required) const {
  const json* v = find(key, required);
  if (v && !v->is_object()) fail(key, std::string("expected an object, got ") + v->type_name());
  return v;
}

}  // namespace shardscope::traces
