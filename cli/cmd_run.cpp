#include "cli/commands.h"

namespace shardscope::cli {

int cmd_run(int argc, char** argv) {
  return not_implemented(
      "run",
      "shardscope run --model M [--policy P] [--set K=V]... [--backend cpu|cuda] [--nproc N] "
      "[--steps S] [--hw H] [--emulate-world N --rank R] [--data FILE] [--profile] [--trace OUT] "
      "[--json] [--save DIR] [--load DIR]",
      argc, argv);
}

}  // namespace shardscope::cli
