// Embedding gather (forward) and scatter-add (backward), cpu::ops_embedding
// twins. One warp per output row. Backward with ids:
//  - fp32 dtable: fp32 atomicAdd straight into the table;
//  - 16-bit dtable: the rows of each distinct id are summed in fp32 in the
//    workspace (slot = the id's first position, found with atomicMin), then
//    added once to the table and rounded: a repeated id is rounded once, not
//    once per occurrence. Atomics make the fp32 sum order vary between runs.
// Positions (ids null) touch distinct rows: a plain elementwise add. Rows
// whose id is padding_idx add nothing in backward (hf::embedding_grad_row).
#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/ops/access.cuh"
#include "engine/cuda/ops/hf_math.h"
#include "engine/cuda/ops/internal.h"
#include "engine/cuda/ops/nvtx_range.h"
#include "engine/cuda/ops/op_checks.h"
#include "engine/cuda/ops/ops.h"
#include "engine/cuda/ops/reduce.cuh"

namespace shardscope::engine::cuda {

using detail::require;
using detail::require_nonneg;
using detail::require_operand;
using detail::require_workspace;

namespace {

constexpr int kEmbeddingThreads = 256;
constexpr int kRowsPerBlock = kEmbeddingThreads / 32;  // one warp per row

unsigned row_blocks(int64_t n) {
  return static_cast<unsigned>(detail::ceil_div(n, kRowsPerBlock));
}

// The table row of output row i: ids[i], or i (positions). -1 when out of range.
__device__ inline int64_t table_row(const int64_t* ids, int64_t i, int64_t rows) {
  const int64_t id = ids != nullptr ? ids[i] : i;
  return id >= 0 && id < rows ? id : -1;
}

// out[i, :] = table[ids[i], :]; a bad id writes zeros and records 1 + i in the flag.
template <typename A>
__global__ void __launch_bounds__(kEmbeddingThreads)
    embedding_forward_kernel(const int64_t* ids, const void* table, ElemType ttable, void* out,
                             ElemType tout, int64_t n, int64_t rows, int64_t dim, int* error_flag) {
  constexpr int W = A::kWidth;
  const int lane = threadIdx.x % 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (i >= n) return;
  const int64_t id = table_row(ids, i, rows);
  if (id < 0 && lane == 0 && error_flag != nullptr) detail::record_bad_row(error_flag, i);
  const A at(ttable), ao(tout);
  for (int64_t c = lane * W; c < dim; c += 32 * W) {
    float v[W];
    if (id >= 0) {
      at.load(table, id * dim + c, v);
    } else {
#pragma unroll
      for (int e = 0; e < W; ++e) v[e] = 0.0f;
    }
    ao.store(out, i * dim + c, v);
  }
}

// fp32 table: dtable[ids[i], :] += dout[i, :] with fp32 atomics (bad ids skipped:
// the forward flagged them; padding ids add nothing).
__global__ void __launch_bounds__(kEmbeddingThreads)
    embedding_backward_atomic_kernel(const int64_t* ids, const void* dout, ElemType tdout,
                                     float* dtable, int64_t n, int64_t rows, int64_t dim,
                                     int64_t padding_idx) {
  const int lane = threadIdx.x % 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (i >= n) return;
  const int64_t id = hf::embedding_grad_row(ids, i, rows, padding_idx);
  if (id < 0) return;
  for (int64_t c = lane; c < dim; c += 32)
    atomicAdd(dtable + id * dim + c, load_elem(dout, tdout, i * dim + c));
}

// owner[id] = smallest i with ids[i] == id (0xffffffff, the memset fill, where
// none, and for padding_idx: the three kernels below skip the rows it holds).
__global__ void embedding_owner_kernel(const int64_t* ids, unsigned* owner, int64_t n, int64_t rows,
                                       int64_t padding_idx) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t id = hf::embedding_grad_row(ids, i, rows, padding_idx);
    if (id >= 0) atomicMin(owner + id, static_cast<unsigned>(i));
  }
}

// acc[owner[ids[i]], :] += dout[i, :] (acc fp32 [n, dim], zeroed).
__global__ void __launch_bounds__(kEmbeddingThreads)
    embedding_gather_grad_kernel(const int64_t* ids, const unsigned* owner, const void* dout,
                                 ElemType tdout, float* acc, int64_t n, int64_t rows, int64_t dim,
                                 int64_t padding_idx) {
  const int lane = threadIdx.x % 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (i >= n) return;
  const int64_t id = hf::embedding_grad_row(ids, i, rows, padding_idx);
  if (id < 0) return;
  const int64_t slot = owner[id];
  for (int64_t c = lane; c < dim; c += 32)
    atomicAdd(acc + slot * dim + c, load_elem(dout, tdout, i * dim + c));
}

// For each owner row i: dtable[ids[i], :] += acc[i, :], rounded once.
__global__ void __launch_bounds__(kEmbeddingThreads)
    embedding_apply_grad_kernel(const int64_t* ids, const unsigned* owner, const float* acc,
                                void* dtable, ElemType ttable, int64_t n, int64_t rows, int64_t dim,
                                int64_t padding_idx) {
  const int lane = threadIdx.x % 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (i >= n) return;
  const int64_t id = hf::embedding_grad_row(ids, i, rows, padding_idx);
  if (id < 0 || owner[id] != static_cast<unsigned>(i)) return;
  for (int64_t c = lane; c < dim; c += 32) {
    const int64_t at = id * dim + c;
    store_elem(dtable, ttable, at, load_elem(dtable, ttable, at) + acc[i * dim + c]);
  }
}

void check_embedding(const char* fn, const int64_t* ids, int64_t n, int64_t rows, int64_t dim) {
  require_nonneg(fn, "n", n);
  require_nonneg(fn, "rows", rows);
  require_nonneg(fn, "dim", dim);
  if (ids == nullptr)
    require(n <= rows, fn,
            "positions mode (ids null) reads rows 0.." + std::to_string(n - 1) +
                " but the table has " + std::to_string(rows) + " rows");
  else
    detail::require_ptr(fn, "ids", ids, n);
}

// Workspace layout of the 16-bit backward: owner table uint32 [rows] at 0,
// fp32 accumulators [n, dim] at the next 256-byte boundary.
size_t owner_bytes(int64_t rows) {
  return (static_cast<size_t>(rows) * 4 + 255) / 256 * 256;
}

}  // namespace

void embedding_forward(cudaStream_t s, const int64_t* ids, ConstDevPtr table, DevPtr out, int64_t n,
                       int64_t rows, int64_t dim, int32_t* error_flag) {
  const char* fn = "embedding_forward";
  check_embedding(fn, ids, n, rows, dim);
  const ElemType ttable = require_operand(fn, "table", table, n > 0 ? rows * dim : 0);
  const ElemType tout = require_operand(fn, "out", out, n * dim);
  NvtxRange range(fn);
  if (n == 0 || dim == 0) return;
  const int width = detail::pack_width(tout);
  const bool packed =
      ttable == tout && dim % width == 0 && detail::aligned_to(16, {table.ptr, out.ptr});
  detail::with_access(packed, tout, [&](auto proto) {
    using A = decltype(proto);
    embedding_forward_kernel<A><<<row_blocks(n), kEmbeddingThreads, 0, s>>>(
        ids, table.ptr, ttable, out.ptr, tout, n, rows, dim, error_flag);
  });
  SS_CUDA_CHECK_LAUNCH(fn);
}

size_t embedding_backward_workspace_bytes(int64_t n, int64_t rows, int64_t dim) {
  if (n <= 0 || rows <= 0 || dim <= 0) return 0;
  return owner_bytes(rows) + static_cast<size_t>(n * dim) * sizeof(float);
}

void embedding_backward(cudaStream_t s, const int64_t* ids, ConstDevPtr dout, DevPtr dtable,
                        int64_t n, int64_t rows, int64_t dim, Workspace ws, int64_t padding_idx) {
  const char* fn = "embedding_backward";
  check_embedding(fn, ids, n, rows, dim);
  require(padding_idx >= -1 && padding_idx < rows, fn,
          "padding_idx " + std::to_string(padding_idx) + " is not -1 or a row of " +
              std::to_string(rows));
  const ElemType tdout = require_operand(fn, "dout", dout, n * dim);
  const ElemType ttable = require_operand(fn, "dtable", dtable, n > 0 ? rows * dim : 0);
  const bool via_workspace = ids != nullptr && ttable != ElemType::f32;
  if (via_workspace) {
    require(n <= 0x7fffffff, fn, "n = " + std::to_string(n) + " exceeds the int32 row range");
    require_workspace(fn, ws, embedding_backward_workspace_bytes(n, rows, dim));
  }
  NvtxRange range(fn);
  if (n == 0 || dim == 0) return;
  if (ids == nullptr) {  // positions: rows 0..n-1 are distinct and contiguous
    detail::launch_add(s, dout, dtable, n * dim, fn);
    return;
  }
  if (!via_workspace) {
    embedding_backward_atomic_kernel<<<row_blocks(n), kEmbeddingThreads, 0, s>>>(
        ids, dout.ptr, tdout, static_cast<float*>(dtable.ptr), n, rows, dim, padding_idx);
    SS_CUDA_CHECK_LAUNCH(fn);
    return;
  }
  auto* owner = static_cast<unsigned*>(ws.ptr);
  auto* acc = reinterpret_cast<float*>(static_cast<char*>(ws.ptr) + owner_bytes(rows));
  SS_CUDA_CHECK(cudaMemsetAsync(owner, 0xff, static_cast<size_t>(rows) * sizeof(unsigned), s));
  SS_CUDA_CHECK(cudaMemsetAsync(acc, 0, static_cast<size_t>(n * dim) * sizeof(float), s));
  embedding_owner_kernel<<<detail::grid_for(n, kEmbeddingThreads), kEmbeddingThreads, 0, s>>>(
      ids, owner, n, rows, padding_idx);
  SS_CUDA_CHECK_LAUNCH(fn);
  embedding_gather_grad_kernel<<<row_blocks(n), kEmbeddingThreads, 0, s>>>(
      ids, owner, dout.ptr, tdout, acc, n, rows, dim, padding_idx);
  SS_CUDA_CHECK_LAUNCH(fn);
  embedding_apply_grad_kernel<<<row_blocks(n), kEmbeddingThreads, 0, s>>>(
      ids, owner, acc, dtable.ptr, ttable, n, rows, dim, padding_idx);
  SS_CUDA_CHECK_LAUNCH(fn);
}

}  // namespace shardscope::engine::cuda
