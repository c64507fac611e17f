// What `simulate`, `sweep` and `demo` say about where their costs came from:
// a preset's figures, or a calibration's fits with the rest from its base
// (sim/hardware_fitted.h).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/hardware.h"

namespace shardscope::cli {

/// {"calibrated": bool, "fitted": {dtype: [efficiency keys]}} ("fitted" only when calibrated).
nlohmann::json cost_sources_json(const sim::HardwareModel& hw);
/// One line: "costs: preset NAME (not calibrated)" or the fitted keys per
/// dtype and that every other op type, dtype and direction is the base's.
std::string cost_sources_text(const sim::HardwareModel& hw);
/// "from the base preset, not fitted: a, b, c" for simulate's own ops, or ""
/// when there is nothing to list (uncalibrated, or everything fitted).
std::string from_base_text(const std::vector<std::string>& from_base);

}  // namespace shardscope::cli
