// The error every executor throws for a schedule it cannot run or a step that
// failed (CPU and CUDA engines alike); messages name the rank, the op and the
// buffer involved.
#pragma once

#include <stdexcept>

namespace shardscope::engine::exec {

class ExecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace shardscope::engine::exec
