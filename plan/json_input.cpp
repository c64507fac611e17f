#include "plan/json_input.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "plan/error.h"

namespace shardscope::plan {

std::string quote_input(std::string_view s) {
  if (s.size() <= kMaxQuotedInput) return std::string(s);
  return std::string(s.substr(0, kMaxQuotedInput)) + "... (" + std::to_string(s.size()) + " bytes)";
}

namespace {
// Thrown from the parser callback: the parse stops at the offending token.
struct Refused {
  std::string message;
};
}  // namespace

namespace {
nlohmann::json parse_checked(std::string_view text, const std::string& what, bool* syntax_error) {
  // Per open object: its keys so far and its latest key (for messages);
  // arrays hold no keys.
  std::vector<std::set<std::string>> keys;
  std::vector<std::string> latest;
  // The path of the open objects' latest keys; without the innermost one
  // (`object`) it names the object itself.
  const auto where = [&](bool object = false) {
    std::string p;
    for (size_t i = 0; i + (object ? 1 : 0) < latest.size(); ++i)
      if (!latest[i].empty()) p += "/" + quote_input(latest[i]);
    return p.empty() ? std::string("the top level") : "'" + p + "'";
  };
  nlohmann::json::parser_callback_t callback = [&](int depth, nlohmann::json::parse_event_t event,
                                                   nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        if (depth >= kMaxJsonDepth)
          throw Refused{"nested deeper than " + std::to_string(kMaxJsonDepth) + " levels at " +
                        where()};
        if (event == E::object_start) {
          keys.emplace_back();
          latest.emplace_back();
        }
        break;
      case E::key: {
        const std::string key = parsed.get<std::string>();
        if (!keys.empty() && !keys.back().insert(key).second)
          throw Refused{"duplicate key '" + quote_input(key) + "' in the object at " + where(true)};
        if (!latest.empty()) latest.back() = key;
        break;
      }
      case E::object_end:
        if (!keys.empty()) {
          keys.pop_back();
          latest.pop_back();
        }
        break;
      case E::array_end:
      case E::value:
        break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const Refused& r) {
    throw Error(what + ": " + r.message);
  } catch (const nlohmann::json::exception& e) {
    if (syntax_error) {
      *syntax_error = true;
      return nullptr;
    }
    // The open objects' keys say where the parse stopped (the callback saw
    // every key up to the bad token).
    if (e.id == 406)  // out_of_range.406: a number beyond a double's range
      throw Error(what + ": the number at " + where() +
                  " is too large for a double: " + quote_input(e.what()));
    throw Error(what + ": not valid JSON (in " + where() + "): " + quote_input(e.what()));
  }
}
}  // namespace

nlohmann::json parse_json_input(std::string_view text, const std::string& what) {
  return parse_checked(text, what, nullptr);
}

std::optional<nlohmann::json> try_parse_json_input(std::string_view text, const std::string& what) {
  bool syntax_error = false;
  nlohmann::json j = parse_checked(text, what, &syntax_error);
  if (syntax_error) return std::nullopt;
  return j;
}

namespace {
std::string over_limit(const std::string& what, const std::string& path, const std::string& size,
                       size_t max_bytes) {
  const bool whole_mib = max_bytes >= (size_t{1} << 20) && max_bytes % (size_t{1} << 20) == 0;
  return what + ": '" + path + "' is " + size + " bytes, over the limit of " +
         std::to_string(max_bytes) + " bytes" +
         (whole_mib ? " (" + std::to_string(max_bytes >> 20) + " MiB)" : std::string());
}
}  // namespace

std::string read_input_file(const std::string& path, const std::string& what, size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(what + ": '" + path + "' is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(what + ": cannot open '" + path + "' (" + std::strerror(errno) + ")");
  // A regular file is refused by its size before a byte is read and read
  // into one buffer of that size; anything else (a pipe, /dev/zero) is read
  // in chunks and refused as soon as it passes the cap.
  std::string text;
  if (std::filesystem::is_regular_file(path, ec)) {
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec && size > max_bytes)
      throw Error(over_limit(what, path, std::to_string(size), max_bytes));
    if (!ec) text.reserve(static_cast<size_t>(size));
  }
  char chunk[1 << 16];
  while (in) {
    in.read(chunk, sizeof chunk);
    const size_t got = static_cast<size_t>(in.gcount());
    if (got > max_bytes - text.size())
      throw Error(over_limit(what, path, "more than " + std::to_string(max_bytes), max_bytes));
    text.append(chunk, got);
  }
  if (in.bad()) throw Error(what + ": error reading '" + path + "'");
  return text;
}

nlohmann::json load_json_input(const std::string& path, const std::string& what) {
  const std::string text = read_input_file(path, what, kMaxJsonFileBytes);
  return parse_json_input(text, what + " '" + path + "'");
}

}  // namespace shardscope::plan
