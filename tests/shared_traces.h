// Where the shared real-world traces are (../shared/traces/kineto-hta, the
// Holistic Trace Analysis test data): $SHARDSCOPE_KINETO_TRACES, else
// shared/ inside the checkout, else ../shared next to it; "" when none.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace shardscope::test {

inline std::string kineto_traces_dir() {
  if (const char* env = std::getenv("SHARDSCOPE_KINETO_TRACES")) return env;
  const std::string source = SHARDSCOPE_SOURCE_DIR;
  for (const char* rel : {"/shared/traces/kineto-hta", "/../shared/traces/kineto-hta"})
    if (std::filesystem::is_directory(source + rel)) return source + rel;
  return "";
}

}  // namespace shardscope::test
