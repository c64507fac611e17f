#include "cli/commands.h"

namespace shardscope::cli {

int cmd_import(int argc, char** argv) {
  return not_implemented("import", "shardscope import --kineto FILE... --out OUT", argc, argv);
}

}  // namespace shardscope::cli
