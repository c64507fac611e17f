#include "engine/device_info.h"

#ifdef SHARDSCOPE_HAVE_CUDA
#include "engine/cuda_module.h"
#endif

namespace shardscope::engine {

CudaAvailability query_cuda() {
#ifdef SHARDSCOPE_HAVE_CUDA
  // Through the CUDA module (cuda_module.h): loading it is the first use of
  // the CUDA libraries in this process. CudaModuleError when it cannot load.
  return cuda_module().query();
#else
  CudaAvailability out;
  out.message =
      "this build of shardscope has no CUDA support (built with SHARDSCOPE_CUDA=OFF "
      "or without the CUDA toolkit)";
  return out;
#endif
}

}  // namespace shardscope::engine
