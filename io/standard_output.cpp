#include "io/standard_output.h"

#include <cerrno>
#include <cstdio>
#include <iostream>

#include "io/output_error.h"

namespace shardscope::io {

void finish_standard_output() {
  std::cout.flush();
  const bool stream_failed = std::cout.bad();
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  const int err = errno;
  if (flush_failed || stream_failed || std::ferror(stdout)) {
    std::clearerr(stdout);
    throw OutputWriteError("standard output",
                           "writing failed" + (err ? ": " + errno_text(err) : std::string()));
  }
}

}  // namespace shardscope::io
