// The policy's keys, one row each: its name, the flavors that may set it,
// how to read it, how to write it and its own check against the model and
// world. policy_from_json, policy_to_json, validate_policy and the sweep's
// grid keys (sim/sweep.cpp) all loop over this table, so adding a key is one
// row here plus the code that consumes it (docs/policy.md, "Adding a key").
// Checks that involve several keys stay in policy.cpp.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/policy.h"

namespace shardscope::plan {

struct PolicyKey {
  const char* name;  // the top-level JSON key
  // Whether a flavor may set the key to anything but that flavor's default
  // (policy_from_json refuses it otherwise, with `flavor_note` as the why).
  bool fsdp1 = true;
  bool fsdp2 = true;
  const char* flavor_note = "";
  // Reads the key's value into `p`, whose flavor and its defaults are set;
  // `key` is the name for messages. Throws plan::Error naming the key.
  void (*read)(const nlohmann::json& v, const std::string& key, Policy& p) = nullptr;
  // Writes the key into the policy document. Keys that are written only when
  // set (overrides, mixture-of-experts keys) write nothing at their default,
  // so that policies without them keep their JSON.
  void (*write)(const Policy& p, nlohmann::json& doc) = nullptr;
  // The key's own check against the model and the resolved world
  // (validate_policy), or null when reading checked everything.
  void (*check)(const Policy& p, const Graph& graph, const World& world) = nullptr;
  // Whether a sweep grid may vary it (world_size comes from --world).
  bool sweepable = true;
  const char* sweep_note = "";
};

// Every key, in the order policy_to_json writes and validate_policy checks them.
const std::vector<PolicyKey>& policy_keys();
// The row of a top-level key, or null.
const PolicyKey* find_policy_key(std::string_view name);

// The keys of one `overrides` entry.
struct OverrideKey {
  const char* name;
  // Refused keys have a row so that their error explains why.
  bool refused = false;
  void (*read)(const nlohmann::json& v, const std::string& key, Flavor flavor,
               UnitOverride& o) = nullptr;
  void (*write)(const UnitOverride& o, nlohmann::json& entry) = nullptr;  // null: never written
};
const std::vector<OverrideKey>& override_keys();

// "a, b, c": the names of the accepted rows (for "unknown key (takes ...)").
std::string policy_key_names();
std::string override_key_names();

}  // namespace shardscope::plan
