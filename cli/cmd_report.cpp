#include "cli/commands.h"

namespace shardscope::cli {

int cmd_report(int argc, char** argv) {
  return not_implemented("report", "shardscope report TRACE [--json]", argc, argv);
}

}  // namespace shardscope::cli
