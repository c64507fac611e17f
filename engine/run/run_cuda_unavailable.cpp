// engine/run in a build without CUDA: Backend::cuda is refused (the CLI says
// so before it gets here, engine/device_info.h query_cuda()).
#include <stdexcept>

#include "engine/device_info.h"
#include "engine/run/run_internal.h"

namespace shardscope::engine::run::detail {

RunResult run_cuda(const RunRequest&) {
  throw std::runtime_error("--backend cuda: " + query_cuda().message);
}

}  // namespace shardscope::engine::run::detail
