// Kineto import at scale, on generated traces: writes a PyTorch-profiler-like
// JSON of about SIZE MB per rank (ProfilerStep ranges; per step cpu_ops,
// cudaLaunchKernel calls and the kernels and NCCL collectives they launch,
// linked by correlation ids), then imports the files with import_kineto
// (`--threads`, 0 = one per hardware thread) and prints the wall time,
// MB/s of JSON, events kept and the peak RSS of the process (getrusage),
// measured after the files are written and closed; for one file read on
// one thread, also the parser's and the reading thread's CPU time. Figures are recorded in
// docs/benchmarks.md ("Kineto import at scale").
//
// With --gzip the files are gzip-compressed (`.json.gz`) before the import,
// which then inflates them as it parses.
//
//   bench_kineto_large [--mb SIZE] [--ranks N] [--threads T] [--gzip] [--dir DIR] [--keep]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "traces/error.h"
#include "traces/file_io.h"
#include "traces/kineto_import.h"

using namespace shardscope::traces;
namespace fs = std::filesystem;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// User + system CPU seconds of the calling thread so far.
double thread_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// User + system CPU seconds of the process so far (all threads).
double cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux: KiB
}

// Writes one rank's trace of about `bytes` bytes; returns the events written.
int64_t write_rank(const std::string& path, int rank, int ranks, int64_t bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path);
  std::fprintf(f,
               "{\"schemaVersion\": 1, \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": %d, "
               "\"world_size\": %d},\n\"deviceProperties\": [{\"id\": %d, \"name\": \"NVIDIA "
               "H100 80GB HBM3\"}],\n\"baseTimeNanoseconds\": 1700000000000000000,\n"
               "\"traceEvents\": [\n",
               rank, ranks, rank);
  const char* kernels[] = {
      "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
      "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
      "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16>",
      "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
      "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"};
  const char* ops[] = {"aten::mm", "aten::gelu", "aten::native_layer_norm", "nccl:all_gather",
                       "nccl:reduce_scatter"};
  int64_t written = 0, events = 0;
  int64_t correlation = 1;
  const int per_step = 2000;  // launches per step
  double ts = 1000.0;         // us
  for (int step = 1; written < bytes; ++step) {
    const double step_us = per_step * 10.0;
    written += std::fprintf(f,
                            "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": "
                            "\"ProfilerStep#%d\", \"pid\": 100, \"tid\": 100, \"ts\": %.3f, "
                            "\"dur\": %.3f, \"args\": {\"External id\": %" PRId64 "}},\n",
                            step, ts, step_us, correlation);
    ++events;
    for (int k = 0; k < per_step && written < bytes; ++k, ++correlation) {
      const int which = k % 5;
      const double op_ts = ts + k * 10.0 + 0.5;
      written += std::fprintf(
          f,
          "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"%s\", \"pid\": 100, \"tid\": 100, "
          "\"ts\": %.3f, \"dur\": 8.250, \"args\": {\"External id\": %" PRId64
          ", \"Record function id\": 0, \"Ev Idx\": %" PRId64
          "}},\n"
          "{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": "
          "100, \"tid\": 100, \"ts\": %.3f, \"dur\": 4.125, \"args\": {\"External id\": %" PRId64
          ", \"cbid\": 211, \"correlation\": %" PRId64
          "}},\n"
          "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"%s\", \"pid\": %d, \"tid\": %d, "
          "\"ts\": %.3f, \"dur\": 7.375, \"args\": {\"External id\": %" PRId64
          ", \"queued\": 0, \"device\": %d, \"context\": 1, \"stream\": %d, \"correlation\": "
          "%" PRId64
          ", \"registers per thread\": 128, \"shared memory\": 0, \"blocks per SM\": 2.5, "
          "\"warps per SM\": 10.0, \"grid\": [264, 1, 1], \"block\": [256, 1, 1], "
          "\"est. achieved occupancy %%\": 25}},\n",
          ops[which], op_ts, correlation, correlation, op_ts + 2.0, correlation, correlation,
          kernels[which], rank, which >= 3 ? 13 : 7, op_ts + 3.0 + 0.001 * k, correlation, rank,
          which >= 3 ? 13 : 7, correlation);
      events += 3;
    }
    ts += step_us;
  }
  std::fprintf(f,
               "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 100, \"tid\": 0, "
               "\"args\": {\"name\": \"python\"}}\n]}\n");
  std::fclose(f);
  return events;
}

// Compresses `path` into `path`.gz and removes `path`.
std::string gzip_file(const std::string& path) {
  const std::string gz = path + ".gz";
  FILE* in = std::fopen(path.c_str(), "rb");
  if (!in) throw std::runtime_error("cannot read " + path);
  OutputFile out(gz);  // ".gz": written compressed
  std::vector<char> buf(size_t{1} << 20);
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), in)) > 0) out.write(buf.data(), n);
  std::fclose(in);
  out.commit();
  fs::remove(path);
  return gz;
}

}  // namespace

int main(int argc, char** argv) {
  double mb = 200;
  int ranks = 1;
  int threads = 0;
  bool keep = false;
  bool gzip = false;
  std::string dir = (fs::temp_directory_path() / "bench_kineto_large").string();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mb" && i + 1 < argc) {
      mb = std::atof(argv[++i]);
    } else if (a == "--ranks" && i + 1 < argc) {
      ranks = std::atoi(argv[++i]);
    } else if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--keep") {
      keep = true;
    } else if (a == "--gzip") {
      gzip = true;
    } else {
      std::fprintf(stderr,
                   "usage: bench_kineto_large [--mb SIZE] [--ranks N] [--threads T] [--gzip] "
                   "[--dir DIR] [--keep]\n");
      return 2;
    }
  }
  if (mb <= 0 || ranks < 1) return 2;
  try {
    fs::create_directories(dir);
    std::vector<std::string> paths;
    int64_t written_events = 0;
    uint64_t bytes = 0, file_bytes = 0;  // of JSON; of the files (compressed with --gzip)
    for (int r = 0; r < ranks; ++r) {
      paths.push_back(dir + "/rank" + std::to_string(r) + ".json");
      written_events += write_rank(paths.back(), r, ranks, static_cast<int64_t>(mb * 1e6));
      bytes += fs::file_size(paths.back());
      if (gzip) paths.back() = gzip_file(paths.back());
      file_bytes += fs::file_size(paths.back());
    }
    const double rss_before = peak_rss_mb();
    const double t0 = now_s();
    const double c0 = cpu_s();
    const double m0 = thread_cpu_s();
    KinetoImportSummary summary;
    const Trace t = import_kineto(paths, &summary, threads);
    const double seconds = now_s() - t0;
    const double cpu = cpu_s() - c0;
    const double main_cpu = thread_cpu_s() - m0;
    const double rss = peak_rss_mb();
    if (gzip)
      std::printf("gzip: %.1f MB of files (%.1f x smaller)\n",
                  static_cast<double>(file_bytes) / 1e6,
                  static_cast<double>(bytes) / static_cast<double>(file_bytes));
    std::printf("%d rank(s), %.1f MB of JSON, %" PRId64 " events written, %zu kept (%" PRId64
                " device, %" PRId64
                " host)\n"
                "import: %.2f s = %.0f MB/s (CPU %.2f s: %.0f MB per CPU second); peak RSS %.0f MB "
                "(%.0f MB before the import), %.0f B of "
                "RSS per kept event, %.2f x the JSON\n",
                ranks, static_cast<double>(bytes) / 1e6, written_events, t.event_count(),
                summary.device_events, summary.host_events, seconds,
                static_cast<double>(bytes) / 1e6 / seconds, cpu,
                static_cast<double>(bytes) / 1e6 / cpu, rss, rss_before,
                rss * 1e6 / static_cast<double>(t.event_count()),
                rss * 1e6 / static_cast<double>(bytes));
    // One file on this thread (--threads 1): the parser runs here and the
    // reading, inflating and JSON guard on a second thread, so on an idle
    // machine with two cores the wall time is about the larger of the two
    // threads' CPU times.
    if (ranks == 1 && threads == 1)
      std::printf(
          "threads: parser (this thread) %.2f s CPU, reader + guard %.2f s: idle 2-core "
          "wall about %.2f s = %.0f MB/s\n",
          main_cpu, cpu - main_cpu, std::max(main_cpu, cpu - main_cpu),
          static_cast<double>(bytes) / 1e6 / std::max(main_cpu, cpu - main_cpu));
    if (!keep)
      for (const std::string& p : paths) fs::remove(p);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kineto_large: %s\n", e.what());
    return 2;
  }
  return 0;
}
