// engine/run's CUDA backend as the `shardscope` executable reaches it: through
// the CUDA module (engine/cuda_module.h), loaded on first use. CUDA builds
// only; the backend itself is run_cuda.cpp, inside the module.
#include "engine/cuda_module.h"
#include "engine/run/run_internal.h"

namespace shardscope::engine::run::detail {

RunResult run_cuda(const RunRequest& request) {
  return cuda_module().run(request);
}

}  // namespace shardscope::engine::run::detail
