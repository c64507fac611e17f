// libFuzzer target: every policy key, through the entry points `--policy` and
// `--set` use (plan::parse_json_input, plan::apply_set, policy_from_json),
// then validated and applied to three small fixed graphs (gpt2-tiny,
// llama-tiny and a 4-expert Mixtral: every key has a model it applies to):
// units, per-unit overrides (their regexes included) and the schedule-size
// estimate. An input that starts with '{' is a policy document; otherwise
// each line is one `--set KEY=VALUE`. Anything is accepted or refused with
// plan::Error (never a crash, a hang or another exception); an accepted
// policy survives a round trip through policy_to_json.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/error.h"
#include "plan/json_input.h"
#include "plan/models.h"
#include "plan/overrides.h"
#include "plan/policy.h"
#include "plan/units.h"

using namespace shardscope;

namespace {

const std::vector<plan::Graph>& graphs() {
  static const std::vector<plan::Graph> g = [] {
    const nlohmann::json mixtral = {{"model_type", "mixtral"},     {"hidden_size", 64},
                                    {"intermediate_size", 96},     {"num_hidden_layers", 2},
                                    {"num_attention_heads", 4},    {"num_key_value_heads", 2},
                                    {"vocab_size", 512},           {"max_position_embeddings", 128},
                                    {"rope_theta", 1e6},           {"rms_norm_eps", 1e-5},
                                    {"num_local_experts", 4},      {"num_experts_per_tok", 2},
                                    {"tie_word_embeddings", false}};
    return std::vector<plan::Graph>{plan::load_model("gpt2-tiny"), plan::load_model("llama-tiny"),
                                    plan::model_from_hf_config(mixtral, "mixtral-tiny")};
  }();
  return g;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json doc = nlohmann::json::object();
  try {
    if (!text.empty() && text[0] == '{') {
      doc = plan::parse_json_input(text, "--policy");
    } else {
      size_t start = 0;
      while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        plan::apply_set(doc, std::string(text.substr(start, end - start)));
        start = end + 1;
      }
    }
  } catch (const plan::Error&) {
    return 0;
  }
  plan::Policy policy;
  try {
    policy = plan::policy_from_json(doc);
  } catch (const plan::Error&) {
    return 0;
  }
  // What an accepted policy writes reads back to the same policy.
  const nlohmann::json written = plan::policy_to_json(policy);
  if (plan::policy_to_json(plan::policy_from_json(written)) != written) std::abort();
  for (const plan::Graph& g : graphs()) {
    for (int64_t world : {int64_t{2}, int64_t{4}}) {
      try {
        const plan::World w = plan::validate_policy(policy, g, world);
        if (plan::estimated_schedule_ops(policy, g) > plan::kMaxScheduleOps) std::abort();
        const plan::UnitPlan up = plan::build_units(g, policy, w);
        const std::vector<plan::UnitSettings> us = plan::unit_settings(policy, up);
        if (us.size() != up.units.size()) std::abort();
        for (const plan::UnitSettings& s : us)
          if (s.reshard_k < 1 || w.shard_group_size % s.reshard_k != 0) std::abort();
      } catch (const plan::Error&) {
      }
    }
  }
  return 0;
}
