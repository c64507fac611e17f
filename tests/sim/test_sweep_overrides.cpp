// Sweep grids varying the policy's `overrides` (one grid value is a whole
// list), and the readable labels the sweep explorer shows for them.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "plan/policy.h"
#include "sim/sweep.h"

using namespace shardscope;
using nlohmann::json;

namespace {
json llama_policy() {
  return {{"wrap", {{"type", "class"}, {"classes", {"LlamaDecoderLayer"}}}}};
}
}  // namespace

TEST_CASE("overrides in sweep grids and their labels", "[overrides][sweep]") {
  const json grid = {{"overrides",
                      {json::array(),
                       {{{"units", {"model.layers.1"}}, {"reshard_after_forward", false}}},
                       {{{"units", "<root>"}, {"mixed_precision", {{"param_dtype", "bf16"}}}}}}}};
  const sim::SweepGrid g = sim::grid_from_json(grid);
  REQUIRE(g.axes.size() == 1);
  CHECK(g.axes[0].values.size() == 3);
  const json second = sim::grid_policy(g, llama_policy(), 1);
  CHECK(plan::policy_from_json(second).overrides.size() == 1);
  CHECK(sim::overrides_labels(second) ==
        std::vector<std::string>{"[model.layers.1]: reshard_after_forward false"});
  CHECK(sim::overrides_labels(sim::grid_policy(g, llama_policy(), 2)) ==
        std::vector<std::string>{"<root>: mixed_precision bf16/bf16"});
  CHECK(sim::overrides_labels(sim::grid_policy(g, llama_policy(), 0)).empty());
}
