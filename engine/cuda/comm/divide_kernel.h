// data[i] = data[i] / divisor for i < count, on a stream: the "avg" of the
// emulated communicator's reductions (the other members contribute zeros).
// Computed in float (a true division, not a multiply by 1/divisor) and
// rounded back to the element type, round to nearest even.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace shardscope::engine::cuda {

enum class DivideElement : unsigned char { f32, bf16, f16 };

// Asynchronous on `stream`; checks the launch (CudaError). count 0 or
// divisor 1 enqueues nothing. divisor >= 1.
void divide_in_place(void* data, size_t count, DivideElement element, int divisor,
                     cudaStream_t stream);

}  // namespace shardscope::engine::cuda
