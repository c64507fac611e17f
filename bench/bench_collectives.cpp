// Shared-memory communicator figures, printed like nccl-tests: for each of
// all_gather, reduce_scatter and all_reduce (float, sum), ranks as processes
// and as threads, world 2 and 4, sizes 8 B .. 64 MiB (x4 steps, then 64 MiB).
//
// Conventions (nccl-tests, doc/PERFORMANCE.md):
//   size S (bytes): all_reduce = the buffer (count * 4); all_gather = the total
//     OUTPUT (n * bytes per rank); reduce_scatter = the total INPUT (n * count * 4).
//     "count" = S / 4 floats; per-rank pieces are S / n.
//   time  = wall time per call on rank 0, averaged over `iters` back-to-back
//           calls between two barriers (us).
//   algbw = S / time (GB/s, 1 GB = 1e9 bytes).
//   busbw = algbw * 2(n-1)/n for all_reduce, algbw * (n-1)/n for all_gather and
//           reduce_scatter.
//   #wrong = elements of the last call's result that differ from the closed form
//           (rank r contributes r + 1 + (i % 7); sums are exact small integers).
//
//   bench_collectives [--worlds 2,4] [--modes processes,threads] [--max-bytes N]
//                     [--slot-bytes N]
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/shm_communicator.h"

using namespace shardscope::engine::comm;

namespace {

enum class Op { all_gather, reduce_scatter, all_reduce };
const char* op_name(Op op) {
  return op == Op::all_gather       ? "all_gather"
         : op == Op::reduce_scatter ? "reduce_scatter"
                                    : "all_reduce";
}

struct Config {
  std::vector<int> worlds{2, 4};
  std::vector<std::string> modes{"processes", "threads"};
  size_t max_bytes = size_t{64} << 20;
  size_t slot_bytes = kDefaultSlotBytes;
};

std::vector<size_t> sizes(size_t max_bytes) {
  std::vector<size_t> s;
  for (size_t b = 8; b <= max_bytes; b *= 4) s.push_back(b);
  if (s.back() != max_bytes) s.push_back(max_bytes);
  return s;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

float value(int rank, size_t i) {
  return static_cast<float>(rank + 1) + static_cast<float>(i % 7);
}

// Runs one size of one op on this rank; returns (seconds per call, wrong count).
std::pair<double, size_t> run_size(Communicator& c, Op op, size_t total_bytes) {
  const int n = c.world_size();
  const size_t nz = static_cast<size_t>(n);
  const size_t total = std::max<size_t>(total_bytes / sizeof(float), nz);  // floats in S
  const size_t piece = op == Op::all_reduce ? total : total / nz;          // per-rank floats
  std::vector<float> in(op == Op::reduce_scatter ? piece * nz : piece);
  for (size_t i = 0; i < in.size(); ++i) in[i] = value(c.rank(), i);
  std::vector<float> out(op == Op::all_gather ? piece * nz : piece);
  std::vector<float> work = in;
  const auto call = [&] {
    switch (op) {
      case Op::all_gather:
        c.all_gather(0, in.data(), out.data(), piece * sizeof(float));
        break;
      case Op::reduce_scatter:
        c.reduce_scatter(0, in.data(), out.data(), piece, ReduceOp::sum);
        break;
      case Op::all_reduce:
        std::memcpy(work.data(), in.data(), in.size() * sizeof(float));
        c.all_reduce(0, work.data(), piece, ReduceOp::sum);
        break;
    }
  };
  const int iters =
      static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / total_bytes, 5, 1000));
  for (int w = 0; w < 3; ++w) call();
  c.barrier(0);
  const double t0 = now_s();
  for (int it = 0; it < iters; ++it) call();
  c.barrier(0);
  const double t = (now_s() - t0) / iters;
  // Check the last result against the closed form.
  size_t wrong = 0;
  const float rank_sum = static_cast<float>(n * (n + 1) / 2);
  if (op == Op::all_gather) {
    for (size_t m = 0; m < nz; ++m)
      for (size_t i = 0; i < piece; ++i)
        wrong += out[m * piece + i] != value(static_cast<int>(m), i);
  } else if (op == Op::reduce_scatter) {
    const size_t base = static_cast<size_t>(c.rank()) * piece;
    for (size_t i = 0; i < piece; ++i)
      wrong += out[i] != rank_sum + static_cast<float>(n) * static_cast<float>((base + i) % 7);
  } else {
    for (size_t i = 0; i < piece; ++i)
      wrong += work[i] != rank_sum + static_cast<float>(n) * static_cast<float>(i % 7);
  }
  return {t, wrong};
}

// The whole sweep on one rank; rank 0 prints.
void sweep(Communicator& c, const Config& cfg, const std::string& mode) {
  const int n = c.world_size();
  for (Op op : {Op::all_gather, Op::reduce_scatter, Op::all_reduce}) {
    if (c.rank() == 0) {
      std::printf("\n# %s, %s, world %d, slot %zu bytes\n", op_name(op), mode.c_str(), n,
                  cfg.slot_bytes);
      std::printf("# %12s %12s %10s %12s %12s %7s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
                  "busbw(GB/s)", "#wrong");
    }
    for (size_t s : sizes(cfg.max_bytes)) {
      if (s < static_cast<size_t>(n) * sizeof(float)) continue;  // at least one float per rank
      const auto [t, wrong] = run_size(c, op, s);
      if (c.rank() != 0) continue;
      const double algbw = static_cast<double>(s) / t / 1e9;
      const double factor =
          op == Op::all_reduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
      std::printf("  %12zu %12zu %10.2f %12.3f %12.3f %7zu\n", s, s / sizeof(float), t * 1e6, algbw,
                  algbw * factor, wrong);
      std::fflush(stdout);
    }
  }
}

void run_threads(const Config& cfg, int world) {
  ThreadCommOptions o;
  o.slot_bytes = cfg.slot_bytes;
  auto comms = make_thread_communicators(world, {world_group(world)}, o);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] { sweep(*comms[static_cast<size_t>(r)], cfg, "threads"); });
  for (auto& t : threads) t.join();
}

int run_processes(const Config& cfg, int world) {
  const std::string name =
      "/shardscope-bench-" + std::to_string(getpid()) + "-" + std::to_string(world);
  std::fflush(stdout);
  const pid_t parent = getpid();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      try {
        ShmOptions o;
        o.name = name;
        o.rank = r;
        o.world_size = world;
        o.groups = {world_group(world)};
        o.slot_bytes = cfg.slot_bytes;
        auto comm = open_shm_communicator(o);
        sweep(*comm, cfg, "processes");
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        std::fflush(stderr);
        _exit(1);
      }
      std::fflush(stdout);
      _exit(0);
    }
    pids.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failures ? 1 : 0;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (!v) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 2;
    }
    ++i;
    if (a == "--worlds") {
      cfg.worlds.clear();
      for (const auto& w : split(v)) cfg.worlds.push_back(std::atoi(w.c_str()));
    } else if (a == "--modes") {
      cfg.modes = split(v);
    } else if (a == "--max-bytes") {
      cfg.max_bytes = std::strtoull(v, nullptr, 10);
    } else if (a == "--slot-bytes") {
      cfg.slot_bytes = std::strtoull(v, nullptr, 10);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (cfg.max_bytes < 8) {
    std::fprintf(stderr, "--max-bytes must be >= 8\n");
    return 2;
  }
  int rc = 0;
  try {
    for (const std::string& mode : cfg.modes) {
      for (int world : cfg.worlds) {
        if (world < 1) {
          std::fprintf(stderr, "--worlds: %d is not a world size\n", world);
          return 2;
        }
        if (mode == "threads") {
          run_threads(cfg, world);
        } else if (mode == "processes") {
          rc |= run_processes(cfg, world);
        } else {
          std::fprintf(stderr, "--modes: unknown mode %s (processes, threads)\n", mode.c_str());
          return 2;
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_collectives: %s\n", e.what());
    return 1;
  }
  return rc;
}
