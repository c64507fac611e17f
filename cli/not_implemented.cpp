#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"

namespace shardscope::cli {

int not_implemented(const char* name, const char* usage, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      std::printf("usage: %s\n\n(not implemented yet: lands with a later issue)\n", usage);
      return 0;
    }
  }
  std::fprintf(stderr, "shardscope %s: not implemented yet\nusage: %s\n", name, usage);
  return 2;
}

}  // namespace shardscope::cli
