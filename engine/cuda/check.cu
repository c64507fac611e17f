#include "engine/cuda/check.h"

namespace shardscope::engine::cuda {

void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  throw CudaError(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                  cudaGetErrorString(err) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace shardscope::engine::cuda
