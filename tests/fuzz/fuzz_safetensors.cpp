// libFuzzer target: the safetensors reader (engine/checkpoint Reader::open on a
// .safetensors file). The input bytes are written to a file, opened and every tensor
// read whole. Any input either opens or throws CheckpointError; what opens must keep
// the reader's promises: each tensor's pieces tile [0, numel) in order and read_all
// returns numel values. Built with FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, so
// checksum mismatches are not enforced and the checks behind them are reached.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "engine/checkpoint/checkpoint.h"

using namespace shardscope::engine::checkpoint;

namespace {

// A directory of its own for this process, removed at exit (never freed: atexit
// handlers may run after static destructors).
const std::string& scratch_dir() {
  static const std::string* dir = [] {
    char tmpl[] = "/tmp/shardscope_fuzz_safetensors_XXXXXX";
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

void check_tiling(const Reader& r, const std::string& name) {
  const Reader::TensorInfo& info = r.info(name);
  int64_t numel = 1;
  for (int64_t d : info.shape) {
    if (d < 0) std::abort();
    numel *= d;
  }
  int64_t cursor = 0;
  for (const Reader::Piece& p : info.pieces) {
    if (p.begin != cursor || p.end <= p.begin || p.file < 0 ||
        static_cast<size_t>(p.file) >= r.files().size())
      std::abort();
    cursor = p.end;
  }
  if (cursor != numel) std::abort();
  if (r.read_all(name).size() != static_cast<size_t>(numel)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/input.safetensors";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  try {
    const Reader r = Reader::open(path);
    for (const std::string& name : r.names()) check_tiling(r, name);
  } catch (const CheckpointError&) {
  }
  return 0;
}
