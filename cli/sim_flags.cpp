#include "cli/sim_flags.h"

#include <string>

namespace shardscope::cli {

sim::HardwareModel hardware_flag(const Args& args) {
  try {
    return sim::load_hardware(args.get("hw", "h100-sxm"));
  } catch (const sim::Error& e) {
    throw UsageError(std::string("--hw: ") + e.what());
  }
}

int64_t memory_limit_flag(const Args& args) {
  if (!args.has("mem-limit")) return 0;
  const int64_t limit = parse_size(args.get("mem-limit"), "--mem-limit");
  if (limit <= 0) throw UsageError("--mem-limit must be > 0");
  return limit;
}

}  // namespace shardscope::cli
