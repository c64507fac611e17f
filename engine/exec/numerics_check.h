// The training loop's check of each step's numbers: training stops at the
// first step whose global loss (or, with grad_clip_norm, total gradient norm)
// is NaN or infinite, as a loop with torch's anomaly checks
// (torch.isfinite(loss), clip_grad_norm_(error_if_nonfinite=True)) would.
// The step's optimizer update has run by then; nothing is saved after it.
// A step skipped by dynamic loss scaling (its gradients overflowed, as
// expected with fp16) is not a failure: its gradient norm is not checked.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/exec/exec_error.h"

namespace shardscope::engine::exec {

struct StepNumbers {
  int64_t index = 0;        // 0-based step of this run
  int64_t global_step = 0;  // 0-based, counting loaded steps
  double global_loss = 0;   // all-reduced mean over the global batch (equal on every rank)
  double local_loss = 0;    // this rank's mean over its micro-batches
  // Total gradient norm before clipping (equal on every rank); < 0: not computed.
  double grad_norm = -1;
  double local_grad_norm_sq = 0;  // this rank's squared norm before the all-reduce
  bool skipped = false;           // loss scaling skipped the optimizer step
  // The global losses of this run's steps so far (this one last, or not yet
  // in); may be null. Copied only when the check fails.
  const std::vector<double>* losses_so_far = nullptr;
};

// Throws NumericsError (every rank the same, naming the step and the ranks
// whose local value was non-finite) when the step's global loss or checked
// gradient norm is not finite. Collective over the world group (0) only then
// (every rank sees the same global values, so all of them take that path):
// one all_gather of the local values, to name the ranks.
void check_step_numbers(const StepNumbers& step, comm::Communicator& comm);

// "nan", "inf" or "-inf" for a non-finite value (JSON has no NaN).
const char* non_finite_name(double value);

}  // namespace shardscope::engine::exec
