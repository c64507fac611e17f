// A fresh directory under the system temp dir, removed with its contents when
// the object goes out of scope. Unique per process and per instance.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace shardscope::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "shardscope_test") {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)) +
            "_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Writes `j` to `name` inside the directory; returns the file's path.
  std::string write(const std::string& name, const nlohmann::json& j) const {
    const std::string file = (path / name).string();
    std::ofstream(file) << j.dump(2);
    return file;
  }
};

}  // namespace shardscope::test
