// Errors raised by the plan library. Every message names the offending field
// (a JSON path such as "/ops/3/fwd_flops" or a policy key such as
// "reshard_after_forward"); the CLI prints it and exits with status 2.
#pragma once

#include <stdexcept>
#include <string>

namespace shardscope::plan {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace shardscope::plan
