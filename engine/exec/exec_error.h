// The errors of the executors (CPU and CUDA engines alike).
//  - ExecError: a schedule an executor cannot run or a step that failed;
//    messages name the rank, the op and the buffer involved.
//  - RuntimeFailure: the run failed for a reason other than its inputs (a
//    non-finite loss, a checkpoint save that could not be written, a lock
//    taken by another run meanwhile): `shardscope run` exits 1 on it, where an
//    input error exits 2 (docs/engine.md, "Exit codes").
//  - NumericsError: a non-finite loss or gradient norm (numerics_check.h).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace shardscope::engine::exec {

class ExecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RuntimeFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What went non-finite, and where. Every rank of a run raises the same one
// for a loss (the global loss is the same all-reduced value on every rank).
struct NonFinite {
  std::string quantity;     // "loss" (global mean loss) or "grad_norm" (total norm, clipping)
  int64_t step = 0;         // 1-based step of this run
  int64_t global_step = 0;  // 1-based, counting the steps a loaded checkpoint had done
  double value = 0;         // the global value: NaN, +inf or -inf
  // Ranks whose own (local) value was non-finite, ascending; empty when every
  // local value was finite (the reduction itself overflowed).
  std::vector<int> ranks;
  std::vector<double> losses_before;  // the global losses of this run's earlier steps
};

class NumericsError : public RuntimeFailure {
 public:
  NumericsError(const std::string& message, NonFinite detail)
      : RuntimeFailure(message), detail_(std::move(detail)) {}
  const NonFinite& detail() const { return detail_; }

 private:
  NonFinite detail_;
};

}  // namespace shardscope::engine::exec
