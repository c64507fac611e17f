#include "cli/commands.h"

namespace shardscope::cli {

int cmd_diff(int argc, char** argv) {
  return not_implemented("diff", "shardscope diff TRACE_A TRACE_B [--json]", argc, argv);
}

}  // namespace shardscope::cli
