#include "cli/output_flags.h"

#include "io/output_error.h"
#include "io/output_target.h"

namespace shardscope::cli {

void check_output_flag(const Args& args, const std::string& flag) {
  if (!args.has(flag)) return;
  try {
    io::check_output_target(args.get(flag));
  } catch (const io::OutputTargetError& e) {
    throw UsageError("--" + flag + ": " + e.what());
  }
}

}  // namespace shardscope::cli
