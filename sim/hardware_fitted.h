// Which costs of a hardware model a calibration fitted (calibrate writes it;
// hardware JSON key "fitted"), so that `simulate` and `sweep` can say which
// costs they used came from the base preset instead (issue 31, item 3).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/graph.h"
#include "plan/schedule.h"

namespace shardscope::sim {

struct HardwareModel;

struct FittedCosts {
  /// True only for a model calibrate produced (or a JSON carrying "fitted"):
  /// a preset fits nothing, and says nothing about fits.
  bool calibrated = false;
  /// Per compute dtype, the efficiency keys fitted from measured events
  /// ("linear", "attention.backward"), directly or from the other direction's
  /// fit of the same dtype.
  std::map<plan::DType, std::set<std::string>> efficiency;
};

/// {"bf16": ["linear", "linear.backward"], ...}.
nlohmann::json fitted_to_json(const FittedCosts& f);
/// Throws Error naming the key ("fitted.bf16[0]") on a bad dtype or op type.
FittedCosts fitted_from_json(const nlohmann::json& v, const std::string& source);

/// For a calibrated model: the graph-op costs the schedule uses that were not
/// fitted, as "TYPE DTYPE forward|backward" ("attention fp32 backward"),
/// sorted and unique. Empty for an uncalibrated model (everything is the
/// preset's; callers say that instead).
std::vector<std::string> costs_from_base(const HardwareModel& hw, const plan::Graph& graph,
                                         const plan::Schedule& schedule);

}  // namespace shardscope::sim
