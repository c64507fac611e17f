#include "cli/commands.h"

namespace shardscope::cli {

int cmd_profile(int argc, char** argv) {
  return not_implemented("profile", "shardscope profile [--out OUT] -- COMMAND [ARGS...]", argc,
                         argv);
}

}  // namespace shardscope::cli
