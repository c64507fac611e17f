// libFuzzer target: the Chrome trace checker, which tools may run on
// third-party files. Any input gives a list of issues, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "traces/chrome_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)shardscope::traces::check_chrome_trace(
      std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
