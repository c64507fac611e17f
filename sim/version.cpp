#include "sim/version.h"

namespace shardscope::sim {
const char* version() {
  return "shardscope-sim 0.1.0";
}
}  // namespace shardscope::sim
