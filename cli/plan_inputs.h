// Shared by every subcommand that plans (plan, simulate, sweep, run): reads
// --model, --policy, --set and the world size into a validated plan input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "plan/graph.h"
#include "plan/policy.h"
#include "traces/human_format.h"

namespace shardscope::cli {

struct PlanInputs {
  plan::Graph graph;
  nlohmann::json policy_doc;  // after --set overrides
  plan::Policy policy;
  plan::World world;
};

// The flags load_plan_inputs reads (--model, --policy, repeatable --set) plus
// the subcommand's own.
std::vector<FlagSpec> plan_input_flags(std::vector<FlagSpec> extra);

// The policy document of --policy with every --set applied (not validated).
nlohmann::json load_policy_doc(const Args& args);

// `world_size` comes from the subcommand (--world, --nproc, ...).
PlanInputs load_plan_inputs(const Args& args, int64_t world_size);

// "1,234,567"
std::string with_commas(int64_t v);
// "1.50 GiB", "512.00 KiB", "12 B" (up to TiB).
inline std::string human_bytes(double bytes) {
  return traces::human_bytes(bytes, traces::ByteUnit::tib);
}

}  // namespace shardscope::cli
