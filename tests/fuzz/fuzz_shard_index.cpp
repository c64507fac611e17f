// libFuzzer target: the sharded checkpoint reader (engine/checkpoint Reader::open on a
// directory with index.json). The input is split at each "@@SHARD@@": part 0 becomes
// index.json, part i >= 1 becomes shard-<i-1>-of-<parts-1>.bin. Any input either
// opens or throws CheckpointError; what opens must keep the reader's promises: each
// tensor's pieces tile [0, numel) in order, and every range read returns its values.
// Built with FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION: checksum mismatches are not
// enforced, so the fuzzer reaches the checks behind them.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint/checkpoint.h"

using namespace shardscope::engine::checkpoint;

namespace {

constexpr std::string_view kSeparator = "@@SHARD@@";

// A directory of its own for this process, removed at exit (never freed: atexit
// handlers may run after static destructors).
const std::string& scratch_dir() {
  static const std::string* dir = [] {
    char tmpl[] = "/tmp/shardscope_fuzz_shard_index_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) std::abort();
    auto* d = new std::string(tmpl);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return *dir;
}

void write_file(const std::string& path, std::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = scratch_dir();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    std::filesystem::remove(e.path(), ec);
  std::vector<std::string_view> parts;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  for (size_t at; (at = rest.find(kSeparator)) != std::string_view::npos;) {
    parts.push_back(rest.substr(0, at));
    rest.remove_prefix(at + kSeparator.size());
  }
  parts.push_back(rest);
  write_file(dir + "/index.json", parts[0]);
  const size_t shards = parts.size() - 1;
  for (size_t i = 1; i < parts.size(); ++i)
    write_file(dir + "/shard-" + std::to_string(i - 1) + "-of-" + std::to_string(shards) + ".bin",
               parts[i]);
  try {
    const Reader r = Reader::open(dir);
    for (const std::string& name : r.names()) {
      const Reader::TensorInfo& info = r.info(name);
      int64_t numel = 1;
      for (int64_t d : info.shape) numel *= d;
      int64_t cursor = 0;
      for (const Reader::Piece& p : info.pieces) {
        if (p.begin != cursor || p.end <= p.begin) std::abort();
        cursor = p.end;
      }
      if (cursor != numel) std::abort();
      // Whole tensor, then a range straddling the middle (spans pieces when there are two).
      if (r.read_all(name).size() != static_cast<size_t>(numel)) std::abort();
      if (numel >= 2) {
        std::vector<float> mid(2);
        r.read(name, numel / 2 - 1, numel / 2 + 1, mid.data());
      }
    }
  } catch (const CheckpointError&) {
  }
  return 0;
}
