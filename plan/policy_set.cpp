// `--set KEY=VALUE` on a policy document (plan/policy.h, apply_set).
#include <cstdio>
#include <sstream>
#include <string_view>

#include "plan/error.h"
#include "plan/json_input.h"
#include "plan/policy.h"

namespace shardscope::plan {

using nlohmann::json;

namespace {

// Offset of the first byte of `s` that is not part of a well-formed UTF-8
// sequence (RFC 3629: no overlong forms, surrogates or code points above
// U+10FFFF), or npos. A JSON string must be UTF-8: nlohmann's dump() throws
// on anything else, so a bare --set value is checked before it becomes one.
size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b < 0x80)
      len = 1;
    else if (b >= 0xC2 && b <= 0xDF)
      len = 2;
    else if (b == 0xE0)
      len = 3, lo = 0xA0;
    else if (b >= 0xE1 && b <= 0xEF)
      len = 3, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b == 0xF0)
      len = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3)
      len = 4;
    else if (b == 0xF4)
      len = 4, hi = 0x8F;
    else
      return i;
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

}  // namespace

void apply_set(json& doc, const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error("--set: expected KEY=VALUE, got '" + assignment + "'");
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  auto not_utf8 = [](const std::string& part, const std::string& where) {
    const size_t bad = invalid_utf8_at(part);
    if (bad == std::string_view::npos) return;
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(part[bad]));
    throw Error(where + " is not valid UTF-8 (byte " + byte + " at offset " + std::to_string(bad) +
                ")");
  };
  not_utf8(key, "--set: the key");
  not_utf8(text, "--set " + quote_input(key) + ": the value");
  json value;
  if (std::optional<json> parsed = try_parse_json_input(text, "--set " + quote_input(key)))
    value = std::move(*parsed);
  else
    value = text;  // bare string: --set wrap.type=class
  if (!doc.is_object()) doc = json::object();
  json* node = &doc;
  std::stringstream ss(key);
  std::string part;
  std::vector<std::string> parts;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty()) throw Error("--set: empty key segment in '" + key + "'");
    if (i + 1 == parts.size()) {
      (*node)[parts[i]] = value;
    } else {
      json& child = (*node)[parts[i]];
      if (!child.is_object()) {
        // A string shorthand ("optimizer": "sgd") becomes its object form.
        json replacement = json::object();
        if (child.is_string()) replacement["type"] = child;
        child = replacement;
      }
      node = &child;
    }
  }
}

}  // namespace shardscope::plan
