// Launch helpers shared by several op families (internal to engine/cuda/ops).
// Callers validate their arguments first; these only launch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/ops/dev_ptr.h"
#include "engine/cuda/ops/element.cuh"

namespace shardscope::engine::cuda::detail {

// ---- cast.cu --------------------------------------------------------------------
// dst[i] = src[i] rounded to dst's dtype (same dtype: cudaMemcpyAsync).
void launch_copy(cudaStream_t s, ConstDevPtr src, DevPtr dst, int64_t n, const char* name);
// dst[i] += src[i] in fp32, rounded to dst's dtype.
void launch_add(cudaStream_t s, ConstDevPtr src, DevPtr dst, int64_t n, const char* name);
// dst[r, j] = src[j] for r < rows, j < cols (bias rows before an accumulating GEMM).
void launch_broadcast_rows(cudaStream_t s, ConstDevPtr src, DevPtr dst, int64_t rows, int64_t cols,
                           const char* name);

// ---- column_sum.cu: deterministic sums over the rows of [rows, cols] ----------------
// Term summed per (row r, column j):
//   dy:              dy[r, j]                                  -> out0 (bias / broadcast grads)
//   layernorm_dw_db: dy[r, j] * (x[r, j] - mean[r]) * rstd[r]   -> out0 (dw), dy[r, j] -> out1 (db)
//   rmsnorm_dw:      dy[r, j] * x[r, j] * rstd[r]               -> out0 (dw)
enum class ColumnTerm : uint8_t { dy, layernorm_dw_db, rmsnorm_dw };
inline int column_term_outputs(ColumnTerm t) {
  return t == ColumnTerm::layernorm_dw_db ? 2 : 1;
}

struct ColumnSumInput {
  ColumnTerm term = ColumnTerm::dy;
  const void* dy = nullptr;
  ElemType dy_type = ElemType::f32;
  const void* x = nullptr;  // norms only
  ElemType x_type = ElemType::f32;
  const float* mean = nullptr;  // layernorm only
  const float* rstd = nullptr;  // norms only
  int64_t rows = 0, cols = 0;
};

// Rows are split into a fixed number of chunks (a function of rows only): one
// thread per (chunk, column) sums its chunk in row order in fp32; the chunks'
// partial sums (workspace) are then added in chunk order and accumulated into
// the outputs. One chunk: no workspace, the first pass accumulates directly.
size_t column_sum_workspace_bytes(int64_t rows, int64_t cols, int outputs);
// out0 (and out1 for layernorm_dw_db) += the column sums. ws must hold
// column_sum_workspace_bytes(rows, cols, outputs) (checked by the caller).
void launch_column_sum(cudaStream_t s, const ColumnSumInput& in, DevPtr out0, DevPtr out1, void* ws,
                       const char* name);

}  // namespace shardscope::engine::cuda::detail
