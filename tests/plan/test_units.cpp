// Unit partitions and shard sizes on the hand-made toy model (toy_graph.h).
#include <catch2/catch.hpp>

#include "plan/error.h"
#include "plan/units.h"
#include "tests/plan/toy_graph.h"

using namespace shardscope;
using plan::Policy;
using plan::UnitPlan;

namespace {

UnitPlan units_for(const nlohmann::json& policy_doc, int64_t world) {
  plan::Graph g = test::toy_graph();
  g.validate();
  Policy p = plan::policy_from_json(policy_doc);
  plan::World w = plan::validate_policy(p, g, world);
  return plan::build_units(g, p, w);
}

// Unit name -> parameter count, in forward order.
std::vector<std::pair<std::string, int64_t>> summary(const UnitPlan& up) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const plan::Unit& u : up.units) out.emplace_back(u.name, u.numel);
  return out;
}

using Summary = std::vector<std::pair<std::string, int64_t>>;

}  // namespace

TEST_CASE("wrap none: the root is the only unit and holds all 90 parameters", "[units]") {
  UnitPlan up = units_for({{"wrap", {{"type", "none"}}}}, 2);
  CHECK(summary(up) == Summary{{"<root>", 90}});
}

TEST_CASE("wrap class Block: each block a unit, tied emb.weight and head.bias stay in the root",
          "[units]") {
  // emb.weight is used by emb and head: its owner is their common ancestor,
  // the root, so the root keeps 40 + head.bias 10 = 50.
  UnitPlan up = units_for({{"wrap", {{"type", "class"}, {"classes", {"Block"}}}}}, 2);
  CHECK(summary(up) == Summary{{"<root>", 50}, {"blocks.0", 20}, {"blocks.1", 20}});
  CHECK(up.units[1].parent == 0);
  // The op of blocks.0.fc runs inside unit 1; head's ops in the root.
  CHECK(up.op_unit == std::vector<int>{0, 1, 2, 0, 0});
  CHECK(up.units[1].first_op == 1);
  CHECK(up.units[1].last_op == 1);
  CHECK(up.units[0].first_op == 0);
  CHECK(up.units[0].last_op == 4);
}

TEST_CASE("wrap size 20: post-order wraps the Linear leaves first (remainder 20 >= 20)",
          "[units]") {
  // blocks.0.fc has remainder 20 -> wrapped; blocks.0 then has remainder 0;
  // emb owns nothing (its weight is tied to head), head's 10 < 20; the root takes 50.
  UnitPlan up = units_for({{"wrap", {{"type", "size"}, {"min_num_params", 20}}}}, 2);
  CHECK(summary(up) == Summary{{"<root>", 50}, {"blocks.0.fc", 20}, {"blocks.1.fc", 20}});
}

TEST_CASE("wrap size 21: nothing reaches the threshold but the root", "[units]") {
  UnitPlan up = units_for({{"wrap", {{"type", "size"}, {"min_num_params", 21}}}}, 2);
  CHECK(summary(up) == Summary{{"<root>", 90}});
}

TEST_CASE("wrap size 40: the ModuleList has remainder 40 but containers are never wrapped",
          "[units]") {
  UnitPlan up = units_for({{"wrap", {{"type", "size"}, {"min_num_params", 40}}}}, 2);
  CHECK(summary(up) == Summary{{"<root>", 90}});
}

TEST_CASE("wrap modules: explicit paths, the tied weight still goes to the root", "[units]") {
  UnitPlan up = units_for({{"wrap", {{"type", "modules"}, {"modules", {"blocks.1", "head"}}}}}, 2);
  CHECK(summary(up) == Summary{{"<root>", 60}, {"blocks.1", 20}, {"head", 10}});
}

TEST_CASE("wrap errors and warnings name the key", "[units][policy]") {
  REQUIRE_THROWS_WITH(units_for({{"wrap", {{"type", "modules"}, {"modules", {"nope"}}}}}, 2),
                      Catch::Contains("wrap.modules") && Catch::Contains("nope"));
  REQUIRE_THROWS_WITH(units_for({{"wrap", {{"type", "class"}, {"classes", {"Nope"}}}}}, 2),
                      Catch::Contains("wrap.classes") && Catch::Contains("Block"));
  UnitPlan up = units_for({{"wrap", {{"type", "class"}, {"classes", {"Block", "Nope"}}}}}, 2);
  REQUIRE(up.warnings.size() == 1);
  CHECK_THAT(up.warnings[0], Catch::Contains("Nope"));
}

TEST_CASE("fsdp1 shards the flat parameter: ceil(P/N) per rank, zero-padded", "[units][shard]") {
  // N = 3. Root 50 -> ceil(50/3) = 17 per rank, padded 51. Blocks 20 -> 7, padded 21.
  UnitPlan up =
      units_for({{"flavor", "fsdp1"}, {"wrap", {{"type", "class"}, {"classes", {"Block"}}}}}, 3);
  CHECK(up.units[0].shard_numel == 17);
  CHECK(up.units[0].padded_numel == 51);
  CHECK(up.units[1].shard_numel == 7);
  CHECK(up.units[1].padded_numel == 21);
}

TEST_CASE("fsdp2 shards each parameter on dim 0: ceil(dim0/N) x rest", "[units][shard]") {
  // N = 3. Root: emb.weight [10,4] -> 4 rows x 4 = 16; head.bias [10] -> 4; shard 20, padded 60.
  // Block: fc.weight [4,4] -> 2 x 4 = 8; fc.bias [4] -> 2; shard 10, padded 30.
  UnitPlan up = units_for({{"wrap", {{"type", "class"}, {"classes", {"Block"}}}}}, 3);
  CHECK(up.units[0].shard_numel == 20);
  CHECK(up.units[0].padded_numel == 60);
  CHECK(up.units[1].shard_numel == 10);
  CHECK(up.units[1].padded_numel == 30);
  CHECK(up.total_padded_numel() == 120);
}

TEST_CASE("sizes that divide N carry no padding, and N = 1 holds everything", "[units][shard]") {
  UnitPlan up2 = units_for({{"wrap", {{"type", "class"}, {"classes", {"Block"}}}}}, 2);
  CHECK(up2.units[0].shard_numel == 25);  // 5 rows x 4 + 5 = 25
  CHECK(up2.units[0].padded_numel == 50);
  UnitPlan ddp = units_for(
      {{"shard_group_size", 1}, {"wrap", {{"type", "class"}, {"classes", {"Block"}}}}}, 4);
  CHECK(ddp.world.replicas == 4);
  CHECK(ddp.units[0].shard_numel == 50);
}

TEST_CASE("hybrid groups: world 8 with shard_group_size 4 shards over 4, 2 replicas",
          "[units][shard]") {
  UnitPlan up = units_for({{"shard_group_size", 4}}, 8);
  CHECK(up.world.shard_group_size == 4);
  CHECK(up.world.replicas == 2);
  // fsdp2, one unit: emb [10,4] -> 3x4 = 12; fc.w [4,4] -> 1x4 = 4 (x2); fc.b [4] -> 1 (x2);
  // head.bias [10] -> 3. Shard 12 + 4 + 1 + 4 + 1 + 3 = 25.
  CHECK(up.units[0].shard_numel == 25);
}
