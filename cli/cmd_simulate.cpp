#include "cli/commands.h"

namespace shardscope::cli {

int cmd_simulate(int argc, char** argv) {
  return not_implemented("simulate",
                         "shardscope simulate --model M [--policy P] [--set K=V]... [--world N] "
                         "[--hw H] [--trace OUT] [--json]",
                         argc, argv);
}

}  // namespace shardscope::cli
