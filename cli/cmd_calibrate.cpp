#include "cli/commands.h"

namespace shardscope::cli {

int cmd_calibrate(int argc, char** argv) {
  return not_implemented("calibrate", "shardscope calibrate TRACE... --out HW.json", argc, argv);
}

}  // namespace shardscope::cli
