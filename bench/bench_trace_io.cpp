// Trace I/O figures: write and load a 10-million-event trace in the binary
// form (time, file size, resident memory per event), the native JSON form
// for comparison (1M events by default), metrics and Chrome export costs.
// Figures are recorded in docs/traces.md.
//
//   bench_trace_io [--events N] [--json-events N] [--dir DIR]
#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "traces/binary_format.h"
#include "traces/chrome_export.h"
#include "traces/file_io.h"
#include "traces/metrics.h"
#include "traces/trace_io.h"

using namespace shardscope::traces;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// VmRSS / VmHWM of this process in bytes.
int64_t status_kb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(f, line))
    if (line.compare(0, n, field) == 0) return std::strtoll(line.c_str() + n + 1, nullptr, 10);
  return -1;
}
int64_t rss_bytes() {
  return status_kb("VmRSS:") * 1024;
}
int64_t peak_rss_bytes() {
  return status_kb("VmHWM:") * 1024;
}
void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

uint64_t file_bytes(const std::string& path) {
  return file_size_of(path);
}

// Bytes the trace's arrays and strings hold (capacity, not size).
uint64_t model_bytes(const Trace& t) {
  uint64_t b = t.strings.bytes() + t.strings.size() * (sizeof(std::string) + 48);
  for (const RankTrace& r : t.ranks) {
    b += r.events.capacity() * sizeof(Event) + r.memory.capacity() * sizeof(MemoryEvent) +
         r.flows.capacity() * sizeof(Flow) + r.steps.capacity() * sizeof(Step) +
         r.lanes.capacity() * sizeof(Lane) + r.represents.capacity() * sizeof(int32_t);
  }
  return b;
}

// An FSDP-like trace: 8 ranks, host/compute/comm/copy lanes, 20 steps,
// 2,000 distinct kernel names, 48 units, memory records (1 per 8 events)
// and flows (1 per 16).
Trace make_trace(int64_t events) {
  std::mt19937_64 rng(1);
  Trace t;
  t.meta.source = Source::simulator;
  t.meta.model = "gpt2-xl";
  t.meta.hardware = "h100-sxm";
  t.meta.world_size = 8;
  const int ranks = 8;
  const int steps = 20;
  std::vector<uint32_t> names, units, ops;
  for (int i = 0; i < 2000; ++i)
    names.push_back(t.intern("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_" +
                             std::to_string(i)));
  for (int i = 0; i < 48; ++i) units.push_back(t.intern("h." + std::to_string(i)));
  for (const char* op : {"matmul", "attention", "layernorm", "gelu", "softmax", "add", "all_gather",
                         "reduce_scatter", "all_reduce", "copy"})
    ops.push_back(t.intern(op));
  const int64_t per_rank = events / ranks;
  for (int rank = 0; rank < ranks; ++rank) {
    RankTrace& r = t.add_rank(rank);
    r.device = rank;
    const uint32_t lanes[4] = {
        t.add_lane(r, "host", LaneKind::host), t.add_lane(r, "compute", LaneKind::compute, 7),
        t.add_lane(r, "comm", LaneKind::comm, 13), t.add_lane(r, "copy", LaneKind::copy, 21)};
    r.events.reserve(static_cast<size_t>(per_rank));
    r.memory.reserve(static_cast<size_t>(per_rank / 8));
    r.flows.reserve(static_cast<size_t>(per_rank / 16));
    const int64_t per_step = per_rank / steps;
    int64_t clock = 0;
    int64_t allocated = 0;
    for (int64_t i = 0; i < per_rank; ++i) {
      if (i % per_step == 0 && static_cast<int>(r.steps.size()) < steps)
        r.steps.push_back(Step{static_cast<int64_t>(r.steps.size()) + 1, clock, clock + 1000});
      const int kind = static_cast<int>(rng() % 8);
      const uint32_t lane = lanes[kind < 4 ? 1 : kind < 6 ? 2 : kind < 7 ? 3 : 0];
      const Category c = kind < 4   ? Category::compute
                         : kind < 6 ? static_cast<Category>(1 + rng() % 3)
                         : kind < 7 ? Category::memcpy_h2d
                                    : Category::marker;
      Event& e = add_event(r, lane, names[rng() % names.size()], c, clock,
                           static_cast<int64_t>(500 + rng() % 20000));
      e.unit = units[rng() % units.size()];
      e.op = ops[rng() % ops.size()];
      e.bytes = rng() % (64 << 20);
      e.flops = rng();
      e.correlation = static_cast<uint32_t>(i);
      clock += static_cast<int64_t>(rng() % 4000);
      if (i % 8 == 0) {
        const int64_t bytes = allocated > (8ll << 30) ? -static_cast<int64_t>(rng() % allocated)
                                                      : static_cast<int64_t>(rng() % (256 << 20));
        allocated += bytes;
        MemoryEvent m;
        m.time_ns = clock;
        m.bytes = bytes;
        m.allocated = allocated;
        m.reserved = allocated + (1ll << 30);
        m.address = rng();
        m.lane = lane;
        m.category = static_cast<MemoryCategory>(rng() % kMemoryCategoryCount);
        r.memory.push_back(m);
      }
      if (i % 16 == 15)
        r.flows.push_back(Flow{static_cast<uint32_t>(i - 1), static_cast<uint32_t>(i)});
    }
  }
  return t;
}

struct LoadFigures {
  double seconds;
  int64_t rss_delta;
  int64_t peak_delta;
  uint64_t model;
};

template <typename F>
LoadFigures measure_load(F&& load, Trace* out) {
  malloc_trim(0);
  const int64_t before = rss_bytes();
  reset_peak_rss();
  const double t0 = now_s();
  *out = load();
  const double seconds = now_s() - t0;
  return LoadFigures{seconds, rss_bytes() - before, peak_rss_bytes() - before, model_bytes(*out)};
}

void print_load(const char* what, const LoadFigures& f, int64_t events, uint64_t file) {
  const double n = static_cast<double>(events);
  std::printf("%-34s %8.3f s  %8.1f MB/s  RSS +%6.1f B/event (peak +%6.1f)  model %5.1f B/event\n",
              what, f.seconds, static_cast<double>(file) / 1e6 / f.seconds,
              static_cast<double>(f.rss_delta) / n, static_cast<double>(f.peak_delta) / n,
              static_cast<double>(f.model) / n);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t events = 10'000'000;
  int64_t json_events = 1'000'000;
  std::string dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--events")) events = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--json-events")) json_events = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
  }
  const std::string bin_path = dir + "/bench_trace_io.sstrace";
  const std::string json_path = dir + "/bench_trace_io.json";
  const std::string chrome_path = dir + "/bench_trace_io.chrome.json";
  std::printf("bench_trace_io: %" PRId64 " events (binary), %" PRId64
              " events (JSON); %u hardware threads; sizeof(Event) = %zu\n\n",
              events, json_events, std::thread::hardware_concurrency(), sizeof(Event));

  {
    double t0 = now_s();
    Trace t = make_trace(events);
    std::printf("%-34s %8.3f s  (%zu events, %zu memory records)\n", "generate", now_s() - t0,
                t.event_count(), t.ranks.size() * t.ranks[0].memory.size());
    t0 = now_s();
    write_trace_binary(t, bin_path);
    const double w = now_s() - t0;
    const uint64_t size = file_bytes(bin_path);
    std::printf("%-34s %8.3f s  %8.1f MB/s  file %.1f MB = %.1f B/event\n", "binary write", w,
                static_cast<double>(size) / 1e6 / w, static_cast<double>(size) / 1e6,
                static_cast<double>(size) / static_cast<double>(events));
  }
  Trace loaded;
  const LoadFigures bin = measure_load([&] { return read_trace_binary(bin_path); }, &loaded);
  print_load("binary load (page cache warm)", bin, events, file_bytes(bin_path));

  double t0 = now_s();
  Metrics m = compute_metrics(loaded);
  std::printf("%-34s %8.3f s\n", "metrics (with breakdowns)", now_s() - t0);
  t0 = now_s();
  m = compute_metrics(loaded, MetricsOptions{false});
  std::printf("%-34s %8.3f s  (step %.3f ms, overlap %.3f)\n", "metrics (totals only)",
              now_s() - t0, m.total.step_time_ms, m.total.overlap);
  loaded = Trace();
  std::remove(bin_path.c_str());

  {
    Trace t = make_trace(json_events);
    t0 = now_s();
    save_trace_json(t, json_path);
    const double w = now_s() - t0;
    const uint64_t size = file_bytes(json_path);
    std::printf("\n%-34s %8.3f s  %8.1f MB/s  file %.1f MB = %.1f B/event\n", "JSON write", w,
                static_cast<double>(size) / 1e6 / w, static_cast<double>(size) / 1e6,
                static_cast<double>(size) / static_cast<double>(json_events));
    t0 = now_s();
    export_chrome(t, chrome_path);
    const double c = now_s() - t0;
    const uint64_t csize = file_bytes(chrome_path);
    std::printf("%-34s %8.3f s  %8.1f MB/s  file %.1f MB = %.1f B/event\n", "Chrome export", c,
                static_cast<double>(csize) / 1e6 / c, static_cast<double>(csize) / 1e6,
                static_cast<double>(csize) / static_cast<double>(json_events));
    std::remove(chrome_path.c_str());
  }
  const LoadFigures js = measure_load([&] { return load_trace(json_path); }, &loaded);
  print_load("JSON load", js, json_events, file_bytes(json_path));
  std::remove(json_path.c_str());
  return 0;
}
