// Standard output is an output like any other: a command whose writes to it
// failed (a full disk, /dev/full, a closed descriptor) must not exit 0.
#pragma once

namespace shardscope::io {

// Flushes std::cout and C's stdout and throws OutputWriteError("standard
// output", ...) when any write to them failed since the process started.
void finish_standard_output();

}  // namespace shardscope::io
