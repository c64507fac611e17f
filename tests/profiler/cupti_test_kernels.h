// Kernels of the CUPTI GPU test (cupti_test_kernels.cu): one block of 32
// threads each, spinning for `cycles` SM clock cycles so that their
// durations are well above CUPTI's timestamp resolution.
#pragma once

#include <cuda_runtime.h>

namespace shardscope::test {

// data: at least 32 ints; writes data[threadIdx.x] = `value` after spinning.
cudaError_t launch_spin_a(int* data, long long cycles, int value, cudaStream_t stream);
cudaError_t launch_spin_b(int* data, long long cycles, int value, cudaStream_t stream);

}  // namespace shardscope::test
