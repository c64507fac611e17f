#include "engine/device_info.h"

#ifdef SHARDSCOPE_HAVE_CUDA
#include "engine/cuda/device_query.h"
#endif

namespace shardscope::engine {

CudaAvailability query_cuda() {
  CudaAvailability out;
#ifdef SHARDSCOPE_HAVE_CUDA
  out.built = true;
  cuda::DeviceQuery q = cuda::query_devices();
  out.usable = q.ok && q.device_count > 0;
  out.device_count = q.device_count;
  out.message = q.message;
#else
  out.message =
      "this build of shardscope has no CUDA support (built with SHARDSCOPE_CUDA=OFF "
      "or without the CUDA toolkit)";
#endif
  return out;
}

}  // namespace shardscope::engine
