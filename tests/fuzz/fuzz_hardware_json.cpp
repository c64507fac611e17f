// libFuzzer target: the hardware JSON reader (sim/hardware.h). Any input
// either loads or throws (nlohmann's parse error, sim::Error naming the
// field); what loads must have positive peaks and bandwidths and survive a
// round trip: hardware_to_json of it reads back to the same JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/hardware.h"

using namespace shardscope::sim;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json doc =
      nlohmann::json::parse(reinterpret_cast<const char*>(data),
                            reinterpret_cast<const char*>(data) + size, nullptr, false);
  if (doc.is_discarded()) return 0;
  HardwareModel hw;
  try {
    hw = hardware_from_json(doc, "fuzz.json");
  } catch (const Error&) {
    return 0;
  }
  if (!(hw.hbm_bytes_per_s > 0) || !(hw.nvlink_bus_bytes_per_s > 0) || hw.gpus_per_node < 1)
    std::abort();
  const nlohmann::json out = hardware_to_json(hw);
  HardwareModel back;
  try {
    back = hardware_from_json(out, "round-trip");
  } catch (const Error&) {
    std::abort();  // what we write must read
  }
  if (hardware_to_json(back) != out) std::abort();
  return 0;
}
