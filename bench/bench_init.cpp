// Weight initialisation throughput (issue 17 item 3: >= 100 M parameters per
// second per core). Initialises every unit shard of GPT-2 small (124 M
// parameters) as one rank of 1 and of 2 ranks would (fsdp2, per block), on
// this thread, and prints parameters per second of this thread's CPU time;
// also the Box-Muller generator the engine used before (normal01, two
// hashes, a log, a sqrt and a cos per value) on 16 M values for comparison.
// Prints figures (docs/benchmarks.md); never asserts on time.
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "engine/exec/data.h"
#include "engine/exec/layout.h"
#include "engine/exec/schedule_info.h"
#include "plan/models.h"
#include "plan/units.h"

using namespace shardscope;
using namespace shardscope::engine::exec;

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main() {
  const plan::Graph g = plan::load_model("gpt2-small");
  float sink = 0;
  for (int n : {1, 2}) {
    plan::Policy policy = plan::default_policy(plan::Flavor::fsdp2);
    const plan::UnitPlan units = plan::build_units(g, policy, plan::validate_policy(policy, g, n));
    std::vector<UnitLayout> layouts;
    for (const plan::Unit& u : units.units) layouts.emplace_back(g, u, policy.flavor, n);
    int64_t elements = 0;
    std::vector<float> shard;
    const double t0 = cpu_seconds();
    for (const UnitLayout& lay : layouts) {
      shard.resize(static_cast<size_t>(lay.shard_numel()));
      fill_initial_shard(g, lay, 0, 1, shard.data());
      elements += lay.shard_numel();
      if (!shard.empty()) sink += shard[shard.size() / 2];
    }
    const double s = cpu_seconds() - t0;
    std::printf("gpt2-small shard 0 of %d: %.1f M parameters in %.3f s CPU: %.0f M parameters/s\n",
                n, static_cast<double>(elements) * 1e-6, s,
                static_cast<double>(elements) * 1e-6 / s);
  }
  constexpr int64_t kOld = int64_t{16} << 20;
  const double t0 = cpu_seconds();
  for (int64_t i = 0; i < kOld; ++i)
    sink += static_cast<float>(0.02 * normal01(1, 7, static_cast<uint64_t>(i)));
  const double s = cpu_seconds() - t0;
  std::printf("Box-Muller normal01 (before): %.0f M values/s\n",
              static_cast<double>(kOld) * 1e-6 / s);
  std::printf("(checksum %g)\n", static_cast<double>(sink));
  return 0;
}
