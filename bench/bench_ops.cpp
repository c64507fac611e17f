// CPU op throughput at GPT-2-small sizes (C = 768, H = 12, D = 64, T = 256,
// B = 1..4), single-threaded (set_blas_threads(1), as the engine runs each
// stream). FLOPs are counted as plan/graph_builder.h does: linear fwd 2*N*in*out,
// bwd 4*N*in*out; attention fwd 4*B*T^2*H*D and bwd 10*B*T^2*H*D over the full
// T x T square (the causal half that is skipped still counts). Prints figures
// (recorded in docs/benchmarks.md); never asserts on time. GFLOP/s use the
// thread's CPU time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <random>
#include <vector>

#include "engine/cpu/ops.h"

using namespace shardscope::engine::cpu;

namespace {

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Seconds of this thread's CPU time: the machine may be shared, and every op
// here runs on the calling thread (BLAS at one thread), so CPU time is the
// op's cost; wall time is printed alongside.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double cpu_s, wall_s;
};

// Best of `reps` runs (after one warm-up call), CPU and wall time each.
Timing best_of(const std::function<void()>& fn, int reps) {
  fn();
  Timing best{1e30, 1e30};
  for (int r = 0; r < reps; ++r) {
    const auto w0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_seconds();
    fn();
    best.cpu_s = std::min(best.cpu_s, thread_cpu_seconds() - c0);
    best.wall_s = std::min(
        best.wall_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
  }
  return best;
}

void row(const char* op, int64_t b, double flops, Timing t) {
  std::printf("%-36s %2lld %9.2f %9.1f %9.2f\n", op, static_cast<long long>(b), t.cpu_s * 1e3,
              flops / t.cpu_s * 1e-9, t.wall_s * 1e3);
}

}  // namespace

int main() {
  set_blas_threads(1);
  const int64_t T = 256, C = 768, H = 12, D = 64;
  const int reps = 5;
  std::mt19937 rng(0);
  std::printf("%-36s %2s %9s %9s %9s\n", "op (GPT-2 small, T=256)", "B", "cpu ms", "GFLOP/s",
              "wall ms");
  for (int64_t B = 1; B <= 4; ++B) {
    const int64_t n = B * T;
    struct Linear {
      const char* name;
      int64_t in, out;
      WeightLayout layout;
    };
    for (const Linear& l :
         {Linear{"c_attn 768->2304 (Conv1D)", C, 3 * C, WeightLayout::in_out},
          Linear{"c_fc 768->3072 (Conv1D)", C, 4 * C, WeightLayout::in_out},
          Linear{"lm_head-like 768->3072 (out,in)", C, 4 * C, WeightLayout::out_in}}) {
      const auto x = random_floats(n * l.in, rng), w = random_floats(l.in * l.out, rng),
                 bias = random_floats(l.out, rng), dy = random_floats(n * l.out, rng);
      std::vector<float> y(n * l.out), dx(n * l.in, 0.0f), dw(l.in * l.out, 0.0f), db(l.out, 0.0f);
      const Timing fwd = best_of(
          [&] {
            linear_forward(x.data(), w.data(), bias.data(), y.data(), n, l.in, l.out, l.layout);
          },
          reps);
      const Timing bwd = best_of(
          [&] {
            linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), n, l.in,
                            l.out, l.layout);
          },
          reps);
      char name[64];
      std::snprintf(name, sizeof name, "%s fwd", l.name);
      row(name, B, 2.0 * n * l.in * l.out, fwd);
      std::snprintf(name, sizeof name, "%s bwd", l.name);
      row(name, B, 4.0 * n * l.in * l.out, bwd);
    }
    // Packed c_attn output [B, T, 3C], as GPT-2 feeds attention.
    AttentionShape s;
    s.batch = B;
    s.seq = T;
    s.n_head = H;
    s.n_kv_head = H;
    s.head_dim = D;
    s.scale = 0.125;
    const auto qkv = random_floats(n * 3 * C, rng), dout = random_floats(n * C, rng);
    std::vector<float> out(n * C), lse(B * H * T), dqkv(n * 3 * C, 0.0f);
    const QkvView view{qkv.data(), qkv.data() + C, qkv.data() + 2 * C, 3 * C, 3 * C};
    const QkvGrad grad{dqkv.data(), dqkv.data() + C, dqkv.data() + 2 * C, 3 * C, 3 * C};
    const Timing fwd = best_of([&] { attention_forward(s, view, out.data(), lse.data()); }, reps);
    const Timing bwd = best_of(
        [&] { attention_backward(s, view, out.data(), lse.data(), dout.data(), grad); }, reps);
    const double square = static_cast<double>(B) * T * T * H * D;
    row("attention H=12 D=64 fwd", B, 4.0 * square, fwd);
    row("attention H=12 D=64 bwd", B, 10.0 * square, bwd);
  }
  return 0;
}
