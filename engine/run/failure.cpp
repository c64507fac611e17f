// How a run fails: the runtime failures `shardscope run` exits 1 on (input
// errors exit 2), and the result of a run stopped by a non-finite value.
#include "engine/comm/communicator.h"
#include "engine/exec/numerics_check.h"
#include "engine/launch/launch.h"
#include "engine/run/run.h"
#include "traces/trace.h"

namespace shardscope::engine::run {

bool is_runtime_failure(const std::exception& error) {
  return dynamic_cast<const comm::CommError*>(&error) != nullptr ||
         dynamic_cast<const launch::LaunchError*>(&error) != nullptr ||
         dynamic_cast<const exec::RuntimeFailure*>(&error) != nullptr;
}

RunResult numerics_failure(const RunRequest& request, const exec::NumericsError& error) {
  const exec::NonFinite& d = error.detail();
  RunResult r;
  r.exit_code = 1;
  r.error = error.what();
  r.has_report = true;
  r.losses = d.losses_before;
  if (request.graph)
    r.tokens_per_step = plan::tokens_per_step(request.policy, *request.graph, request.world_size);
  const traces::Source source =
      request.backend == Backend::cuda ? traces::Source::engine_cuda : traces::Source::engine_cpu;
  r.failure = {{"source", traces::source_name(source)},
               {"world_size", request.world_size},
               {"error",
                {{"kind", "numerics"},
                 {"message", r.error},
                 {"quantity", d.quantity},
                 {"value", exec::non_finite_name(d.value)},
                 {"step", d.step},
                 {"global_step", d.global_step},
                 {"ranks", d.ranks}}},
               {"losses", r.losses},
               {"tokens_per_step", r.tokens_per_step}};
  return r;
}

}  // namespace shardscope::engine::run
