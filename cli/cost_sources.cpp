#include "cli/cost_sources.h"

namespace shardscope::cli {

nlohmann::json cost_sources_json(const sim::HardwareModel& hw) {
  nlohmann::json j = {{"calibrated", hw.fitted.calibrated}};
  if (hw.fitted.calibrated) j["fitted"] = sim::fitted_to_json(hw.fitted);
  return j;
}

std::string cost_sources_text(const sim::HardwareModel& hw) {
  if (!hw.fitted.calibrated)
    return "costs: hardware '" + hw.name + "' as given (not calibrated: no cost is fitted)";
  std::string fitted;
  for (const auto& [dtype, keys] : hw.fitted.efficiency)
    for (const std::string& k : keys)
      fitted += std::string(fitted.empty() ? "" : ", ") + k + " " + plan::dtype_name(dtype);
  return "costs: calibrated; efficiencies fitted for " +
         (fitted.empty() ? std::string("nothing") : fitted) +
         "; every other op type, dtype and direction from the base preset";
}

std::string from_base_text(const std::vector<std::string>& from_base) {
  if (from_base.empty()) return "";
  std::string s = "from the base preset, not fitted:";
  for (size_t i = 0; i < from_base.size(); ++i) s += (i ? ", " : " ") + from_base[i];
  return s;
}

}  // namespace shardscope::cli
