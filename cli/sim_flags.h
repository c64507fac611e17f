// Flags shared by the commands that simulate (simulate, sweep): the hardware
// model and the memory limit, with their usage errors.
#pragma once

#include <cstdint>

#include "cli/args.h"
#include "sim/hardware.h"

namespace shardscope::cli {

// --hw (default h100-sxm): a preset or a hardware JSON; UsageError naming
// --hw when it does not load.
sim::HardwareModel hardware_flag(const Args& args);

// --mem-limit BYTES ("80GiB"); 0 when absent; UsageError when not > 0.
int64_t memory_limit_flag(const Args& args);

}  // namespace shardscope::cli
