#include "cli/plan_inputs.h"

#include <fstream>

#include "plan/error.h"
#include "plan/json_input.h"
#include "plan/models.h"
#include "plan/vocab_padding.h"

namespace shardscope::cli {

std::vector<FlagSpec> plan_input_flags(std::vector<FlagSpec> extra) {
  std::vector<FlagSpec> flags = {{"model"}, {"policy"}, {"set", true, true}};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

nlohmann::json load_policy_doc(const Args& args) {
  nlohmann::json doc = nlohmann::json::object();
  if (args.has("policy")) {
    doc = plan::load_json_input(args.get("policy"), "--policy");
  }
  for (const std::string& s : args.all("set")) plan::apply_set(doc, s);
  return doc;
}

PlanInputs load_plan_inputs(const Args& args, int64_t world_size) {
  PlanInputs in;
  in.graph = plan::load_model(args.require("model"));
  in.policy_doc = load_policy_doc(args);
  in.policy = plan::policy_from_json(in.policy_doc);
  in.graph = plan::pad_vocabulary(std::move(in.graph), in.policy.vocab_pad_to);
  in.world = plan::validate_policy(in.policy, in.graph, world_size);
  return in;
}

std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

}  // namespace shardscope::cli
