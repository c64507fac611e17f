#include "cli/commands.h"

namespace shardscope::cli {

int cmd_export(int argc, char** argv) {
  return not_implemented("export", "shardscope export TRACE --chrome OUT [--per-rank]", argc, argv);
}

}  // namespace shardscope::cli
