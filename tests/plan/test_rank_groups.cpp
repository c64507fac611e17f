// rank_groups: one rank's schedule stands for every rank's, up to the groups
// its collectives use.
#include <catch2/catch.hpp>

#include <algorithm>

#include "plan/error.h"
#include "plan/models.h"
#include "plan/schedule.h"
#include "tests/plan/toy_graph.h"

using namespace shardscope;
using nlohmann::json;

namespace {

// Checks that every rank's own schedule equals rank 0's with groups remapped
// by rank_groups(rank 0's schedule).
void check_world(const json& doc, int64_t world) {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  const plan::Policy p = plan::policy_from_json(doc);
  const plan::World w = plan::validate_policy(p, g, world);
  const plan::UnitPlan units = plan::build_units(g, p, w);
  const plan::Schedule s0 = plan::build_schedule(g, p, units, 0);
  const plan::RankGroups rg = plan::rank_groups(s0);
  REQUIRE(rg.of_rank.size() == static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const plan::Schedule sr = plan::build_schedule(g, p, units, r);
    REQUIRE(sr.ops.size() == s0.ops.size());
    for (size_t i = 0; i < s0.ops.size(); ++i) {
      if (s0.ops[i].group < 0) {
        CHECK(sr.ops[i].group < 0);
        continue;
      }
      const auto at = std::find(rg.used.begin(), rg.used.end(), s0.ops[i].group);
      REQUIRE(at != rg.used.end());
      CHECK(sr.ops[i].group ==
            rg.of_rank[static_cast<size_t>(r)][static_cast<size_t>(at - rg.used.begin())]);
      CHECK(sr.ops[i].bytes == s0.ops[i].bytes);
      CHECK(sr.ops[i].seq == s0.ops[i].seq);
    }
    // Each mapped group holds r.
    for (int gid : rg.of_rank[static_cast<size_t>(r)]) {
      const auto& ranks = s0.groups[static_cast<size_t>(gid)].ranks;
      CHECK(std::find(ranks.begin(), ranks.end(), r) != ranks.end());
    }
  }
}

}  // namespace

TEST_CASE("rank_groups maps rank 0's groups onto each rank's own schedule", "[rank_groups]") {
  SECTION("full sharding, world 4") {
    check_world({{"batch_size", 2}, {"seq_len", 16}}, 4);
  }
  SECTION("hybrid 2 x 3 with reshard to 2 of fsdp2") {
    check_world({{"shard_group_size", 2}, {"batch_size", 2}, {"seq_len", 16}}, 6);
  }
  SECTION("fsdp2 reshard_after_forward 2 within shard groups of 4") {
    check_world({{"reshard_after_forward", 2}, {"batch_size", 2}, {"seq_len", 16}}, 8);
  }
  SECTION("DDP") {
    check_world({{"shard_group_size", 1}, {"batch_size", 2}, {"seq_len", 16}}, 3);
  }
}

TEST_CASE("rank_groups: rank 5 of shard groups of 4 uses shard1 and replica1", "[rank_groups]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  const plan::Policy p = plan::policy_from_json({{"shard_group_size", 4}, {"seq_len", 16}});
  const plan::UnitPlan units = plan::build_units(g, p, plan::validate_policy(p, g, 8));
  const plan::Schedule s = plan::build_schedule(g, p, units, 5);
  const plan::RankGroups rg = plan::rank_groups(s);
  std::vector<std::string> names;
  for (int gid : rg.used) names.push_back(s.groups[static_cast<size_t>(gid)].name);
  CHECK(names == std::vector<std::string>{"world", "shard1", "replica1"});
  // Rank 2 would use shard0 and replica2.
  std::vector<std::string> of2;
  for (int gid : rg.of_rank[2]) of2.push_back(s.groups[static_cast<size_t>(gid)].name);
  CHECK(of2 == std::vector<std::string>{"world", "shard0", "replica2"});
}
