// Initial weights: the counter-based ziggurat is a standard normal (moments
// and tail fractions against closed forms), fill() agrees with value() at
// every index, and a rank's directly generated shard equals the slice of the
// full unit it used to receive by broadcast, for both flavors and any world
// size: so no broadcast is needed and the values do not depend on the world.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "engine/exec/data.h"
#include "engine/exec/layout.h"
#include "engine/exec/normal_ziggurat.h"
#include "engine/exec/schedule_info.h"
#include "plan/models.h"
#include "plan/units.h"

using namespace shardscope;
using namespace shardscope::engine::exec;

namespace {

// P(|X| > x) for X ~ N(0, 1).
double two_sided_tail(double x) {
  return std::erfc(x / std::sqrt(2.0));
}

}  // namespace

TEST_CASE("the ziggurat's values have the moments and tails of N(0, 1)", "[exec][init]") {
  constexpr int64_t n = 4'000'000;
  std::vector<float> v(n);
  fill_normal(0x1234, 0, n, 1.0, v.data());
  double sum = 0, sum2 = 0, sum4 = 0;
  int64_t beyond1 = 0, beyond3 = 0, beyond_r = 0;
  for (float f : v) {
    const double x = f;
    sum += x;
    sum2 += x * x;
    sum4 += x * x * x * x;
    beyond1 += std::abs(x) > 1.0;
    beyond3 += std::abs(x) > 3.0;
    beyond_r += std::abs(x) > 3.442619855899;  // drawn by the tail branch only
  }
  const double mean = sum / n, var = sum2 / n - mean * mean, kurt = sum4 / n;
  // Five standard errors: mean 1/sqrt(n), variance sqrt(2/n), E[x^4] = 3 with
  // standard error sqrt(96/n); a fraction p: sqrt(p (1 - p) / n).
  CHECK(std::abs(mean) < 5.0 / std::sqrt(double(n)));
  CHECK(std::abs(var - 1.0) < 5.0 * std::sqrt(2.0 / n));
  CHECK(std::abs(kurt - 3.0) < 5.0 * std::sqrt(96.0 / n));
  for (auto [count, x] :
       {std::pair{beyond1, 1.0}, std::pair{beyond3, 3.0}, std::pair{beyond_r, 3.442619855899}}) {
    const double p = two_sided_tail(x);
    INFO("P(|X| > " << x << "): " << double(count) / n << " against " << p);
    CHECK(std::abs(double(count) / n - p) < 5.0 * std::sqrt(p * (1 - p) / n));
  }
  // Deterministic: the same (key, index), the same value; another key differs.
  CHECK(ziggurat_normal(0x1234, 17) == ziggurat_normal(0x1234, 17));
  CHECK(static_cast<float>(ziggurat_normal(0x1234, 17)) == v[17]);
  CHECK(ziggurat_normal(0x1235, 17) != ziggurat_normal(0x1234, 17));
}

TEST_CASE("fill equals value at every index, from any first element", "[exec][init]") {
  ParamInit init;
  init.std = 0.02;
  init.stream = hash_name("h.0.attn.c_attn.weight");
  std::vector<float> out(1000);
  init.fill(123'456, 1000, 7, out.data());
  for (int64_t j = 0; j < 1000; ++j)
    REQUIRE(out[static_cast<size_t>(j)] == init.value(123'456 + j, 7));
  init.kind = ParamInit::Kind::one;
  init.fill(5, 3, 7, out.data());
  CHECK(out[0] == 1.0f);
  CHECK(out[2] == 1.0f);
}

TEST_CASE("a rank's generated shard is its slice of the full unit, any flavor and world",
          "[exec][init]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  for (const plan::Flavor flavor : {plan::Flavor::fsdp1, plan::Flavor::fsdp2}) {
    for (int64_t n : {1, 2, 3, 4, 7}) {
      const plan::Policy policy = plan::default_policy(flavor);
      const plan::UnitPlan units =
          plan::build_units(g, policy, plan::validate_policy(policy, g, static_cast<int>(n)));
      for (const plan::Unit& unit : units.units) {
        const UnitLayout lay(g, unit, flavor, n);
        if (lay.shard_numel() == 0) continue;
        const std::vector<float> full = initial_unsharded(g, lay, 3);
        std::vector<float> gathered(full.size());
        lay.unsharded_to_gathered(full.data(), gathered.data(), 4);
        for (int64_t q = 0; q < n; ++q) {
          INFO(plan::flavor_name(flavor) << " n=" << n << " unit " << unit.name << " shard " << q);
          const std::vector<float> shard = initial_shard(g, lay, q, 3);
          const std::vector<float> slice(gathered.begin() + q * lay.shard_numel(),
                                         gathered.begin() + (q + 1) * lay.shard_numel());
          REQUIRE(shard == slice);
        }
      }
    }
  }
}
