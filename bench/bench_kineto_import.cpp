// Kineto import speed: a PyTorch profiler trace (default: the largest shared
// one, mtia-rank0, 87 MB decompressed) decompressed once into memory, then
// imported `--runs` times from that text (host side included); prints MB/s
// of JSON and events/s, and the gunzip rate separately. Figures are
// recorded in docs/benchmarks.md.
//
//   bench_kineto_import [--runs N] [FILE.json[.gz]]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "traces/file_io.h"
#include "traces/kineto_import.h"

using namespace shardscope::traces;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string path =
      std::string(SHARDSCOPE_SOURCE_DIR) + "/../shared/traces/kineto-hta/mtia-rank0.json.gz";
  int runs = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else {
      path = argv[i];
    }
  }
  if (runs < 1) runs = 1;
  try {
    const double t0 = now_s();
    const std::string text = read_file(path);  // decompressed when gzip
    const double read_s = now_s() - t0;
    std::printf("%s: %.1f MB of JSON, read and decompressed in %.3f s\n", path.c_str(),
                static_cast<double>(text.size()) / 1e6, read_s);
    double best = 1e30, total = 0;
    size_t events = 0;
    for (int r = 0; r < runs; ++r) {
      KinetoImportSummary summary;
      const double a = now_s();
      const Trace t = import_kineto_text(text, path, &summary);
      const double s = now_s() - a;
      best = std::min(best, s);
      total += s;
      events = t.event_count();
    }
    const double mb = static_cast<double>(text.size()) / 1e6;
    std::printf(
        "import (host side included): %zu events; best %.3f s = %.0f MB/s, mean %.3f s = "
        "%.0f MB/s, %.2f M events/s (best)\n",
        events, best, mb / best, total / runs, mb / (total / runs),
        static_cast<double>(events) / best / 1e6);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kineto_import: %s\n", e.what());
    return 2;
  }
  return 0;
}
