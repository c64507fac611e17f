// The policy key table (plan/policy_keys.h): every key has one row, and the
// reader, the writer, validation and the sweep all follow it.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "plan/error.h"
#include "plan/policy.h"
#include "plan/policy_keys.h"
#include "tests/plan/toy_graph.h"

using namespace shardscope;
using nlohmann::json;

TEST_CASE("policy_to_json writes exactly the rows that are written at their default",
          "[policy][keys]") {
  std::set<std::string> rows;
  for (const plan::PolicyKey& k : plan::policy_keys()) {
    CHECK(rows.insert(k.name).second);  // one row per key
    CHECK(plan::find_policy_key(k.name) == &k);
  }
  CHECK(plan::find_policy_key("bogus") == nullptr);
  const json written = plan::policy_to_json(plan::default_policy(plan::Flavor::fsdp2));
  for (const auto& [key, value] : written.items()) CHECK(rows.count(key) == 1);
  // The five written only when set: every other row is in the default's JSON.
  std::set<std::string> only_when_set{"overrides", "token_balance", "moe_routing", "attention",
                                      "vocab_pad_to"};
  for (const std::string& r : rows) CHECK(written.contains(r) == (only_when_set.count(r) == 0));
  CHECK(rows.size() == written.size() + only_when_set.size());
}

TEST_CASE("every row reads back what it writes, set or not", "[policy][keys]") {
  json doc = {{"flavor", "fsdp1"},
              {"world_size", 8},
              {"shard_group_size", 4},
              {"wrap", {{"type", "class"}, {"classes", {"Block"}}}},
              {"reshard_after_forward", false},
              {"backward_prefetch", "post"},
              {"forward_prefetch", true},
              {"limit_all_gathers", false},
              {"mixed_precision", {{"param_dtype", "fp16"}, {"reduce_dtype", "fp32"}}},
              {"loss_scale", "dynamic"},
              {"cpu_offload", true},
              {"zero_grad_set_to_none", false},
              {"activation_checkpointing", {{"every", 3}, {"offset", 1}}},
              {"optimizer", {{"type", "sgd"}, {"lr", 0.5}, {"momentum", 0.9}}},
              {"grad_clip_norm", 2.0},
              {"batch_size", 3},
              {"seq_len", 64},
              {"grad_accum_steps", 2},
              {"seed", 7},
              {"overrides", {{{"units", {"layers.0"}}, {"reshard_after_forward", true}}}},
              {"token_balance", {{"weights", {0.25, 0.75}}}},
              {"moe_routing", "topk"},
              {"attention", {{"sdpa_backend", "math"}}},
              {"allocator", {{"expandable_segments", true}}},
              {"vocab_pad_to", 128}};
  const json once = plan::policy_to_json(plan::policy_from_json(doc));
  for (const plan::PolicyKey& k : plan::policy_keys()) {
    INFO(k.name);
    REQUIRE(once.contains(k.name));
    REQUIRE(doc.contains(k.name));  // the document above sets every key
  }
  CHECK(once.at("backward_prefetch") == "post");
  CHECK(once.at("loss_scale") == "dynamic");
  CHECK(once.at("activation_checkpointing") == json{{"every", 3}, {"offset", 1}});
  CHECK(once.at("token_balance") == json{{"weights", {0.25, 0.75}}});
  CHECK(once.at("attention") == json{{"sdpa_backend", "math"}});
  CHECK(once.at("allocator") == json{{"expandable_segments", true}});
  CHECK(plan::policy_to_json(plan::policy_from_json(once)) == once);
}

TEST_CASE("an unknown key names the keys a policy and an override take", "[policy][keys]") {
  CHECK_THROWS_WITH(plan::policy_from_json({{"bogus", 1}}),
                    "policy: bogus: unknown key (a policy takes " + plan::policy_key_names() + ")");
  CHECK(plan::policy_key_names().rfind("flavor, world_size, shard_group_size, wrap, ", 0) == 0);
  // The refused cpu_offload row explains itself, and is not offered.
  CHECK(plan::override_key_names() == "units, reshard_after_forward, mixed_precision");
  CHECK_THROWS_WITH(plan::policy_from_json({{"overrides", {{{"units", ".*"}, {"prefetch", 1}}}}}),
                    "policy: overrides[0].prefetch: unknown key (an override takes units, "
                    "reshard_after_forward, mixed_precision)");
  CHECK_THROWS_WITH(
      plan::policy_from_json({{"overrides", {{{"units", ".*"}, {"cpu_offload", true}}}}}),
      Catch::Contains("overrides[0].cpu_offload: per-unit CPU offload is not modelled"));
}

TEST_CASE("a key a flavor lacks may state only that flavor's default", "[policy][keys]") {
  const plan::PolicyKey* limit = plan::find_policy_key("limit_all_gathers");
  REQUIRE(limit != nullptr);
  CHECK(limit->fsdp1);
  CHECK_FALSE(limit->fsdp2);
  // fsdp2's default is false: stating it is fine, true is not.
  CHECK_FALSE(plan::policy_from_json({{"limit_all_gathers", false}}).limit_all_gathers);
  CHECK_THROWS_WITH(
      plan::policy_from_json({{"limit_all_gathers", true}}),
      "policy: limit_all_gathers: applies to fsdp1 only (fsdp2 has no all-gather rate limiter)");
  CHECK(plan::policy_from_json({{"flavor", "fsdp1"}, {"limit_all_gathers", false}})
            .limit_all_gathers == false);
  // A policy built in code is checked by the row's own check.
  plan::Policy p = plan::default_policy(plan::Flavor::fsdp2);
  p.limit_all_gathers = true;
  const plan::Graph g = test::toy_graph();
  CHECK_THROWS_WITH(plan::validate_policy(p, g, 2),
                    "policy: limit_all_gathers: applies to fsdp1 only");
}

TEST_CASE("only world_size and vocab_pad_to are not sweepable, and say why", "[policy][keys]") {
  for (const plan::PolicyKey& k : plan::policy_keys()) {
    INFO(k.name);
    const std::string name = k.name;
    CHECK(k.sweepable == (name != "world_size" && name != "vocab_pad_to"));
    CHECK(k.read != nullptr);
    CHECK(k.write != nullptr);
  }
  CHECK(std::string(plan::find_policy_key("world_size")->sweep_note) ==
        "give the worlds with --world N[,N...]");
  // The model is padded once per sweep, before any configuration.
  CHECK_THAT(plan::find_policy_key("vocab_pad_to")->sweep_note,
             Catch::Contains("give vocab_pad_to with --policy or --set"));
}
