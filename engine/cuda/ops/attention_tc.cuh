// Tensor-core (WMMA) path of the fused causal attention, for bf16 and f16
// (attention_tc_forward.cu, attention_tc_backward.cu): the same interface,
// layouts, lse and workspace as the fp32 SIMT kernels (attention_common.cuh);
// only the products run on tensor cores (nvcuda::wmma m16n16k16, 16-bit
// operands, fp32 accumulators, sm_80+). Selected with
// AttentionKernel::tensor_core; head_dim a multiple of 16, at most 128.
//
// Operand rounding: the tiles in shared memory hold 16-bit values: q is roped
// and scaled in fp32 (as load_tile does) and then rounded, k is roped and
// rounded, v and dout are the stored values; the probabilities P and dS are
// rounded to 16 bits before their products. Every sum (scores, softmax, O,
// dK, dV, dQ) accumulates in fp32.
//
// Shared-memory tiles: row-major, 16-bit rows of kD + 8 elements (wmma loads
// need 32-byte aligned fragment pointers and a leading dimension that is a
// multiple of 8 elements for 16-bit and of 4 for fp32 data; the +8 also
// spreads rows over the banks), fp32 scratch rows of 64 + 4 or kD + 4.
// Columns [D, kD) of the 16-bit tiles and rows past seq are zeros, so a
// bucket kD > D computes what a kernel for D would.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/cuda/ops/attention_common.cuh"

namespace shardscope::engine::cuda::attention_detail {

// Rows of a query or key tile (4 warps x 16 rows) and threads per block.
constexpr int kTcTile = 64;
constexpr int kTcWarps = 4;
constexpr int kTcThreads = 32 * kTcWarps;
// Largest head_dim of the tensor-core path; head_dim must be a multiple of 16.
constexpr int kTcMaxHeadDim = 128;
// Leading dimensions (elements) of the [., 64] score tiles: fp32 scratch and
// 16-bit probabilities.
constexpr int kTcScoreLd = kTcTile + 4;
constexpr int kTcProbLd = kTcTile + 8;

// Throws std::invalid_argument naming `fn` unless the tensor-core path can run
// dtype `dt` and `head_dim` (bf16 or f16; a multiple of 16, <= 128). Touches no
// CUDA API: runs before any launch, on machines without a device too.
inline void require_tensor_core(const char* fn, plan::DType dt, int64_t head_dim) {
  const std::string prefix = std::string(fn) + ": AttentionKernel::tensor_core ";
  if (dt != plan::DType::bf16 && dt != plan::DType::f16)
    throw std::invalid_argument(prefix + "needs bf16 or f16 tensors, q has dtype " +
                                plan::dtype_name(dt) + " (use AttentionKernel::simt)");
  if (head_dim % 16 != 0)
    throw std::invalid_argument(prefix + "needs a head_dim that is a multiple of 16, got " +
                                std::to_string(head_dim) + " (use AttentionKernel::simt)");
  if (head_dim > kTcMaxHeadDim)
    throw std::invalid_argument(prefix + "supports head_dim <= " + std::to_string(kTcMaxHeadDim) +
                                ", got head_dim = " + std::to_string(head_dim) +
                                " (use AttentionKernel::simt)");
}

// Forward on the tensor cores: out [B, T, H*D] and lse [B, H, T] exactly as
// the SIMT forward defines them. `et` is bf16 or f16, p.head_dim a multiple of
// 16 <= 128 (require_tensor_core), p.seq >= 1 and p.batch >= 1.
void launch_forward_tc(cudaStream_t s, const AttentionParams& p, ElemType et, const void* q,
                       const void* k, const void* v, void* out, float* lse);

// Number of blocks of the backward main kernel (key tiles x B x Hkv), for the
// caller's grid check before its first launch.
inline int64_t backward_tc_blocks(const AttentionParams& p) {
  return (p.seq + kTcTile - 1) / kTcTile * p.batch * p.n_kv_head;
}

// The backward's main launch on the tensor cores, between the SIMT backward's
// preprocess (delta, dq_acc = 0) and dq launches: dq_acc += dS K (roped
// space, unscaled, fp32 [B, T, H, D]), dk += R^T dK and dv += dV, as the
// SIMT main kernel does. Same preconditions as launch_forward_tc.
void launch_backward_tc(cudaStream_t s, const AttentionParams& p, ElemType et, const void* q,
                        const void* k, const void* v, const void* dout, const float* lse,
                        const float* delta, float* dq_acc, void* dk, void* dv);

}  // namespace shardscope::engine::cuda::attention_detail
