#include "cli/output_flags.h"

#include "io/output_error.h"
#include "io/output_target.h"

namespace shardscope::cli {

void check_output_path(const std::string& flag, const std::string& path) {
  try {
    io::check_output_target(path);
  } catch (const io::OutputTargetError& e) {
    throw UsageError("--" + flag + ": " + e.what());
  }
}

void check_output_flag(const Args& args, const std::string& flag) {
  if (args.has(flag)) check_output_path(flag, args.get(flag));
}

}  // namespace shardscope::cli
