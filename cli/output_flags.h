// Output flags (--out, --trace, --chrome, --graph-out, ...) are checked when
// the command starts, before any work: a path that cannot be an output
// (io/output_target.h: a directory, a block device, a socket, a read-only
// file, a missing folder) is a usage error naming the flag, exit 2, and a
// sweep or a training run never runs only to fail at its end.
#pragma once

#include <string>

#include "cli/args.h"

namespace shardscope::cli {

// Throws UsageError("--FLAG: 'PATH': why") when `path` cannot be written.
void check_output_path(const std::string& flag, const std::string& path);
// The same for a flag's value, when the flag is given.
void check_output_flag(const Args& args, const std::string& flag);

}  // namespace shardscope::cli
