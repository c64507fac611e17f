// Helpers for the checkpoint tests: deterministic non-trivial values, raw file
// edits (truncate, flip a byte), and the message check every refusal must pass.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/checkpoint/checkpoint.h"

namespace shardscope::test {

// Value k of tensor `seed`: distinct per tensor and element, never zero, not integral.
inline float test_value(int seed, int64_t k) {
  return static_cast<float>(seed) * 1.25f + static_cast<float>(k) * 0.0625f + 0.3f +
         static_cast<float>(std::sin(static_cast<double>(k) + seed));
}
inline std::vector<float> test_values(int seed, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = test_value(seed, k);
  return v;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}
inline void flip_byte(const std::string& path, size_t at, unsigned char mask = 0x01) {
  std::string b = read_bytes(path);
  REQUIRE(at < b.size());
  b[at] = static_cast<char>(static_cast<unsigned char>(b[at]) ^ mask);
  write_bytes(path, b);
}
inline void truncate_to(const std::string& path, size_t size) {
  std::filesystem::resize_file(path, size);
}

// Reader::open(path) throws CheckpointError whose message names `file` and contains
// `problem` (empty: any problem).
inline void require_refused(const std::string& path, const std::string& file,
                            const std::string& problem) {
  try {
    engine::checkpoint::Reader::open(path);
  } catch (const engine::checkpoint::CheckpointError& e) {
    const std::string msg = e.what();
    INFO("message: " << msg);
    CHECK(msg.find(file) != std::string::npos);
    CHECK(msg.find(problem) != std::string::npos);
    return;
  }
  FAIL("Reader::open(" << path << ") accepted a bad checkpoint; expected: " << problem);
}

// Files in `dir` whose name contains ".tmp.".
inline int temp_files_in(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    n += e.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

}  // namespace shardscope::test
