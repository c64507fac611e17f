// Hardware models as JSON: hardware_to_json, hardware_from_json (strict:
// unknown keys and out-of-range values are errors naming the key) and
// load_hardware (a preset name or a file). Both loop over the key table
// (sim/hardware_keys.h); what involves several keys stays here.
#include "sim/hardware.h"

#include <filesystem>
#include <optional>

#include "plan/error.h"
#include "plan/json_input.h"
#include "sim/hardware_keys.h"

namespace shardscope::sim {

nlohmann::json hardware_to_json(const HardwareModel& hw) {
  nlohmann::json j;
  for (const HardwareKey& k : hardware_keys()) k.write(hw, k.name, j);
  return j;
}

HardwareModel hardware_from_json(const nlohmann::json& doc, const std::string& source) {
  if (!doc.is_object()) throw Error(source + ": a hardware document must be a JSON object");
  const std::string base = hardware_base(doc, source);
  HardwareModel h = hardware_preset(base);
  h.name = source;
  // An efficiency the document sets for a type (in `efficiency`, or in
  // `dtype_efficiency` for one dtype) replaces the base's curves for that
  // type and its backward: a preset's published curve would otherwise take
  // precedence over it. Curves the document gives itself are read afterwards. Malformed
  // entries are left to the main loop, which names them.
  const auto drop_base_curves = [&](const nlohmann::json& map, std::optional<plan::DType> dtype) {
    if (!map.is_object()) return;
    for (const auto& [type, value] : map.items()) {
      (void)value;
      for (auto& [d, curves] : h.efficiency_curves)
        if (!dtype || d == *dtype) {
          curves.erase(type);
          // "attention" covers its backward ops too, unless given apart.
          if (!map.contains(efficiency_key(type, true))) curves.erase(efficiency_key(type, true));
        }
    }
  };
  if (const auto e = doc.find("efficiency"); e != doc.end()) drop_base_curves(*e, std::nullopt);
  if (const auto e = doc.find("dtype_efficiency"); e != doc.end() && e->is_object())
    for (const auto& [dtype_name, map] : e->items()) {
      plan::DType d;
      try {
        d = plan::parse_dtype(dtype_name, source);
      } catch (const std::exception&) {
        continue;
      }
      drop_base_curves(map, d);
    }
  for (const auto& [key, v] : doc.items()) {
    if (key == kHardwareBaseKey) continue;
    const HardwareKey* row = find_hardware_key(key);
    if (!row) throw Error(source + ": unknown hardware key '" + key + "'");
    row->read(v, key, source, h);
  }
  h.validate();
  return h;
}

HardwareModel load_hardware(const std::string& spec) {
  if (is_hardware_preset(spec)) return hardware_preset(spec);
  std::error_code ec;
  if (!std::filesystem::exists(spec, ec))
    throw Error(
        "hardware '" + spec +
        "' is neither a preset (h100-sxm, h200-sxm, a100-sxm, h100-pcie, cpu-local) nor a readable "
        "file");
  nlohmann::json doc;
  try {
    doc = plan::load_json_input(spec, "hardware");
  } catch (const plan::Error& e) {
    throw Error(e.what());
  }
  return hardware_from_json(doc, spec);
}

}  // namespace shardscope::sim
