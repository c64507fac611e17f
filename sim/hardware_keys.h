// The hardware model's JSON keys, one row each: its name, how to read it over
// a base model, how to write it and its own range check. hardware_from_json,
// hardware_to_json and HardwareModel::validate all loop over this table, so
// adding a key is one row here plus the code that consumes it
// (docs/simulator.md, "Adding a hardware key"). A nested object
// (collectives, op_level, fitted, ...) is one row that delegates to its own
// reader, writer and check. What involves several keys stays in
// hardware_from_json: "base" (the preset every other key overrides) and the
// base's efficiency curves that a document's efficiencies replace.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/hardware.h"

namespace shardscope::sim {

struct HardwareKey {
  const char* name;  // the top-level JSON key
  // Reads the key's value over `hw` (the base preset with the document's
  // earlier keys applied); `key` is the name and `source` the document, for
  // messages. Throws Error "SOURCE: hardware key 'KEY...' ...".
  void (*read)(const nlohmann::json& v, const std::string& key, const std::string& source,
               HardwareModel& hw) = nullptr;
  // Writes the key into the hardware document. Keys written only when set
  // (dtype_efficiency, memory_ops, efficiency_curves, fitted) write nothing
  // when empty, so that documents without them keep their JSON.
  void (*write)(const HardwareModel& hw, const std::string& key, nlohmann::json& doc) = nullptr;
  // The key's own range check (HardwareModel::validate): throws Error
  // "hardware 'NAME': KEY ..." with the value and the limit where one
  // applies. Null when every value the reader accepts is valid.
  void (*check)(const HardwareModel& hw, const std::string& key) = nullptr;
};

// Every key but "base", in the order validate checks them (the first field
// out of range is the one reported).
const std::vector<HardwareKey>& hardware_keys();
// The row of a top-level key, or null ("base" has none).
const HardwareKey* find_hardware_key(std::string_view name);

// The preset a hardware document starts from: its "base" key, default
// h100-sxm. Throws Error when "base" is not a string.
std::string hardware_base(const nlohmann::json& doc, const std::string& source);
inline constexpr const char* kHardwareBaseKey = "base";

}  // namespace shardscope::sim
