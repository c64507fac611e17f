// Warp and block reductions (internal to engine/cuda/ops). Every reduction
// combines values in a fixed order (butterfly within a warp, then warp 0 over
// the warps' results), so a launch with the same block size gives the same
// bits on every run.
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

namespace shardscope::engine::cuda::detail {

constexpr unsigned kFullMask = 0xffffffffu;

template <typename V>
__device__ inline V warp_sum(V v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ inline float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread
// of the block must call it. Returns the total to every thread. `scratch`
// holds 32 values in shared memory; it is reused on return (the trailing
// barrier makes a second call safe).
template <typename V>
__device__ inline V block_sum(V v, V* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  V total = lane < warps ? scratch[lane] : V(0);
  total = warp_sum(total);
  __syncthreads();
  return total;
}

// Online softmax statistics of a set of values: running max m and
// s = sum exp(x - m). Combining two sets rescales to the larger max.
struct MaxSumExp {
  float max;
  float sum;
};

__device__ inline MaxSumExp combine(MaxSumExp a, MaxSumExp b) {
  if (a.sum == 0.0f) return b;  // an empty set (max -inf) contributes nothing
  if (b.sum == 0.0f) return a;
  const float m = fmaxf(a.max, b.max);
  return {m, a.sum * __expf(a.max - m) + b.sum * __expf(b.max - m)};
}

__device__ inline MaxSumExp warp_combine(MaxSumExp v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const MaxSumExp other{__shfl_xor_sync(kFullMask, v.max, offset),
                          __shfl_xor_sync(kFullMask, v.sum, offset)};
    v = combine(v, other);
  }
  return v;
}

// Block-wide combine (same contract as block_sum); scratch holds 32 entries.
__device__ inline MaxSumExp block_combine(MaxSumExp v, MaxSumExp* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  v = warp_combine(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  MaxSumExp total = lane < warps ? scratch[lane] : MaxSumExp{-CUDART_INF_F, 0.0f};
  total = warp_combine(total);
  __syncthreads();
  return total;
}

// Records a bad index read from data in a device error flag holding 1 + row:
// the smallest offending row wins (0 = no error yet), so the flag is the same
// whatever order the threads run in.
__device__ inline void record_bad_row(int* flag, long long row) {
  const int value = row >= 0x7ffffffe ? 0x7fffffff : static_cast<int>(row + 1);
  int old = *reinterpret_cast<volatile int*>(flag);
  while (old == 0 || old > value) {
    const int seen = atomicCAS(flag, old, value);
    if (seen == old) break;
    old = seen;
  }
}

}  // namespace shardscope::engine::cuda::detail
