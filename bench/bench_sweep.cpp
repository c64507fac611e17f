// Sweep speed: two grids of ~10,000 policy configurations of Llama-3-70B on 1,024 GPUs
// (128 nodes of 8 H100s), planned and simulated without traces on every core,
// as `shardscope sweep` runs them. Prints configurations/s, simulated
// events/s and where the configurations went (rejected by validation, out of
// memory, fit); figures are recorded in docs/benchmarks.md. Never asserts on
// time.
//   bench_sweep [THREADS]   (default: all cores)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "plan/models.h"
#include "sim/hardware.h"
#include "sim/sweep.h"

using namespace shardscope;
using nlohmann::json;

namespace {

void run(const char* title, const plan::Graph& graph, const json& grid_doc, int threads) {
  const sim::SweepGrid grid = sim::grid_from_json(grid_doc);
  sim::SweepOptions o;
  o.worlds = {1024};
  o.base_policy = {{"wrap", {{"type", "class"}, {"classes", {"LlamaDecoderLayer"}}}}};
  o.threads = threads;
  const sim::HardwareModel hw = sim::hardware_preset("h100-sxm");

  const auto t0 = std::chrono::steady_clock::now();
  const sim::SweepResult r = sim::run_sweep(graph, grid, hw, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  size_t fits = 0, oom = 0, oom_persistent = 0;
  for (const sim::SweepPoint& p : r.points) {
    if (!p.rejected) (p.fits ? fits : oom)++;
    if (!p.rejected && !p.fits && p.sim_events == 0) ++oom_persistent;
  }
  const double n = static_cast<double>(r.points.size());
  const int used = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  std::printf("%s: llama3-70b x1024 on h100-sxm, %zu configurations, %d threads\n", title,
              r.points.size(), used);
  std::printf(
      "  rejected by validation %zu, out of memory %zu (%zu by the persistent state alone), fit "
      "%zu\n",
      r.rejected, oom, oom_persistent, fits);
  std::printf("  wall %.3f s: %.0f configurations/s (%.3f ms per configuration per thread)\n", s,
              n / s, 1e3 * s / n * used);
  std::printf("  %llu simulated events: %.2f M events/s\n",
              static_cast<unsigned long long>(r.sim_events),
              static_cast<double>(r.sim_events) / s / 1e6);
  if (r.best >= 0) {
    const sim::SweepPoint& b = r.points[static_cast<size_t>(r.best)];
    std::printf("  highest throughput that fits: %.0f tokens/s (step %.1f ms), %s\n",
                b.tokens_per_s, b.metrics.step_time_ms, b.policy.dump().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  const plan::Graph graph = plan::load_model("llama3-70b");
  // Every configuration valid (fsdp2 knobs only): 4 x 2 x 4 x 2 x 3 x 5 x 2 x 2 x 3 = 11,520.
  run("fsdp2 grid", graph,
      {{"reshard_after_forward", {true, false, 8, 2}},
       {"backward_prefetch", {"none", "pre"}},
       {"forward_prefetch", {0, 1, 2, 3}},
       {"mixed_precision.param_dtype", {"bf16", "fp32"}},
       {"activation_checkpointing", {"none", "full", {{"every", 2}}}},
       {"shard_group_size", {8, 16, 64, 128, nullptr}},
       {"batch_size", {1, 2}},
       {"cpu_offload", {false, true}},
       {"seq_len", {2048, 4096, 8192}}},
      threads);
  // Both flavors crossed with every knob (10,368): the combinations a flavor
  // does not accept are rejected by validation, as `shardscope sweep` does.
  run("both flavors", graph,
      {{"flavor", {"fsdp1", "fsdp2"}},
       {"reshard_after_forward", {true, false, 8}},
       {"backward_prefetch", {"none", "pre", "post"}},
       {"forward_prefetch", {false, true, 2}},
       {"limit_all_gathers", {true, false}},
       {"mixed_precision.param_dtype", {"bf16", "fp32"}},
       {"activation_checkpointing", {"none", "full"}},
       {"shard_group_size", {8, 64, nullptr}},
       {"batch_size", {1, 2}},
       {"cpu_offload", {false, true}},
       {"seq_len", {4096, 8192}}},
      threads);
  return 0;
}
