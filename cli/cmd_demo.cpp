#include "cli/commands.h"

namespace shardscope::cli {

int cmd_demo(int argc, char** argv) {
  return not_implemented("demo", "shardscope demo", argc, argv);
}

}  // namespace shardscope::cli
