// libFuzzer target: the readers of untrusted JSON documents other than
// traces and hardware files, through plan/json_input.h: a policy
// (--policy, --set), a sweep grid (--grid), a Hugging Face config.json and a
// graph JSON (--model; native or exported). Any input either parses and
// builds, or throws plan::Error / sim::Error naming the place (nesting,
// duplicate keys, a bad field); a message never quotes more than ~200
// characters of the input per quote. A graph that reads writes back to JSON
// that reads as the same graph.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "plan/error.h"
#include "plan/graph_io.h"
#include "plan/json_input.h"
#include "plan/models.h"
#include "plan/policy.h"
#include "sim/hardware.h"
#include "sim/sweep.h"

using namespace shardscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json doc;
  try {
    doc = plan::parse_json_input(text, "fuzz.json");
  } catch (const plan::Error& e) {
    if (std::string(e.what()).size() > 4 * plan::kMaxQuotedInput + 400) std::abort();
    return 0;
  }
  try {
    (void)plan::policy_from_json(doc);
  } catch (const plan::Error&) {
  }
  try {
    (void)sim::grid_from_json(doc, "fuzz.json");
  } catch (const sim::Error&) {
  } catch (const plan::Error&) {
  }
  try {
    const plan::Graph g = plan::model_from_hf_config(doc, "fuzz.json");
    if (g.params_total() < 0) std::abort();
  } catch (const plan::Error&) {
  }
  try {
    const nlohmann::json written = plan::graph_to_json(plan::graph_from_json(doc));
    if (plan::graph_to_json(plan::graph_from_json(written)) != written) std::abort();
  } catch (const plan::Error&) {
  }
  return 0;
}
