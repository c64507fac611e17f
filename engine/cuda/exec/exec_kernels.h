// Small kernels of the CUDA executor that are not model ops: moving a unit's
// elements between the gathered and unsharded layouts (engine/exec/layout.h)
// with dtype conversion (fsdp2 copy-out, reshard copy, gradient cast into the
// reduce-scatter input), and the step's device scalars (loss, gradient norm).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/ops/dev_ptr.h"

namespace shardscope::engine::cuda {

// A unit's layout on the device. Gathered index i (rank q = i / s, offset
// o = i % s) maps to unsharded index: identity (fsdp1's flat parameter), or
// for fsdp2 the parameter p whose chunk holds o (shard_offset[p] <= o <
// shard_offset[p] + chunk[p], parameters in ascending shard_offset):
//   unsharded[p] + q * chunk[p] + (o - shard_offset[p]).
// `table` holds 3 * count int64: shard_offset[count], chunk[count], unsharded[count].
struct DevLayout {
  const int64_t* table = nullptr;  // device memory; null when identity
  int32_t count = 0;
  int64_t shard_numel = 0;  // s
  int64_t full_numel = 0;   // n * s
  bool identity = true;
};

// dst[j] = sum over k < nsrc of src[k][unsharded(begin + j)], j in [0, count):
// a range of the gathered layout read from unsharded-layout sources, summed in
// fp32 and rounded to dst's dtype. 1 <= nsrc <= 3.
void unsharded_to_gathered(cudaStream_t stream, const DevLayout& layout, const ConstDevPtr* src,
                           int nsrc, DevPtr dst, int64_t begin, int64_t count);
// Per-parameter unsharded gradients (fsdp2) added into a gathered-layout
// buffer: for every gathered index j whose unsharded index u falls in
// [offset[k], offset[k] + numel[k]), dst[j] += src[k][u - offset[k]]
// (fp32 arithmetic, rounded to dst's dtype); padding is left as it is. Any
// number of parameters (launched in batches).
void params_to_gathered(cudaStream_t stream, const DevLayout& layout, const ConstDevPtr* src,
                        const int64_t* offset, const int64_t* numel, int count, DevPtr dst);
// dst[unsharded(i)] = src[i] for i in [0, full_numel), converted to dst's dtype.
void gathered_to_unsharded(cudaStream_t stream, const DevLayout& layout, ConstDevPtr src,
                           DevPtr dst);

// One cross-entropy forward's mean loss (*micro, device double) stored into the
// loss tensor (dtype of `loss_out`, one element) and, when loss_sum is
// non-null, added to *loss_sum (the step's sum over micro-steps).
void finish_cross_entropy(cudaStream_t stream, const double* micro, DevPtr loss_out,
                          double* loss_sum);

// *dst = (float)*src and back: the scalar all-reduce of the squared gradient
// norm runs in fp32 (as the CPU engine's does).
void f64_to_f32(cudaStream_t stream, const double* src, float* dst);
void f32_to_f64(cudaStream_t stream, const float* src, double* dst);

}  // namespace shardscope::engine::cuda
