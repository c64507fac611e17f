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

// Loads the divide kernels of every element type into the current context
// now (cudaFuncGetAttributes). Under CUDA's lazy loading (the default since
// CUDA 12.2) a kernel is loaded at its first launch, and loading may
// synchronise the context: a first launch while another stream is held by an
// emulated collective's wait would wait for that wait to be released (the
// CUDA C++ Programming Guide, "Lazy Loading", "Potential Hazards").
void preload_divide_kernels();

}  // namespace shardscope::engine::cuda
