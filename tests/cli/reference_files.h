// Helpers shared by the tests that read the committed PyTorch references
// (tests/reference/) and the exported graphs beside them.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardscope::test {

// `s` single-quoted for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  nlohmann::json j;
  in >> j;
  return j;
}

// The .json files directly under tests/<dir> (not its subfolders), sorted.
inline std::vector<std::filesystem::path> reference_files(const std::string& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/" + dir))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace shardscope::test
