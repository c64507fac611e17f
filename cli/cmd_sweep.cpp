#include "cli/commands.h"

namespace shardscope::cli {

int cmd_sweep(int argc, char** argv) {
  return not_implemented("sweep",
                         "shardscope sweep --model M --grid G [--world N[,N...]] [--hw H] "
                         "[--mem-limit BYTES] [--threads T] [--out FILE] [--json]",
                         argc, argv);
}

}  // namespace shardscope::cli
