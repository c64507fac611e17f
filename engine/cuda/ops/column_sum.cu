// Deterministic column sums over [rows, cols] operands (bias gradients,
// broadcast residual gradients, norm weight gradients); see internal.h.
#include "engine/cuda/check.h"
#include "engine/cuda/ops/internal.h"
#include "engine/cuda/ops/op_checks.h"

namespace shardscope::engine::cuda::detail {

namespace {

constexpr int kColumnThreads = 256;    // columns per block
constexpr int64_t kRowsPerChunk = 32;  // target rows summed by one thread
constexpr int64_t kMaxChunks = 256;    // grid.y, and partial sums per column

int64_t chunk_count(int64_t rows) {
  const int64_t chunks = ceil_div(rows, kRowsPerChunk);
  return chunks < 1 ? 1 : (chunks > kMaxChunks ? kMaxChunks : chunks);
}

template <ColumnTerm kTerm>
__device__ inline void column_term(const ColumnSumInput& in, int64_t r, int64_t j,
                                   float (&term)[2]) {
  const int64_t at = r * in.cols + j;
  const float dy = load_elem(in.dy, in.dy_type, at);
  if (kTerm == ColumnTerm::dy) {
    term[0] = dy;
  } else if (kTerm == ColumnTerm::layernorm_dw_db) {
    const float xhat = (load_elem(in.x, in.x_type, at) - in.mean[r]) * in.rstd[r];
    term[0] = dy * xhat;
    term[1] = dy;
  } else {
    term[0] = dy * (load_elem(in.x, in.x_type, at) * in.rstd[r]);
  }
}

// grid (ceil(cols / 256), chunks): thread (chunk k, column j) sums rows
// [k * rows_per_chunk, (k + 1) * rows_per_chunk) in order. partials: fp32
// [outputs][chunks][cols]; null: accumulate straight into the outputs (one chunk).
template <ColumnTerm kTerm>
__global__ void __launch_bounds__(kColumnThreads)
    column_partials_kernel(ColumnSumInput in, int64_t rows_per_chunk, float* partials, DevPtr out0,
                           ElemType out0_type, DevPtr out1, ElemType out1_type) {
  constexpr int kOutputs = kTerm == ColumnTerm::layernorm_dw_db ? 2 : 1;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= in.cols) return;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < in.rows ? begin + rows_per_chunk : in.rows;
  float sum[2] = {0.0f, 0.0f};
#pragma unroll 4
  for (int64_t r = begin; r < end; ++r) {
    float term[2];
    column_term<kTerm>(in, r, j, term);
#pragma unroll
    for (int o = 0; o < kOutputs; ++o) sum[o] += term[o];
  }
  if (partials != nullptr) {
    const int64_t chunks = gridDim.y;
#pragma unroll
    for (int o = 0; o < kOutputs; ++o) partials[(o * chunks + chunk) * in.cols + j] = sum[o];
    return;
  }
  store_elem(out0.ptr, out0_type, j, load_elem(out0.ptr, out0_type, j) + sum[0]);
  if (kOutputs == 2) store_elem(out1.ptr, out1_type, j, load_elem(out1.ptr, out1_type, j) + sum[1]);
}

// out[j] += sum over chunks k (in order) of partials[k][j].
__global__ void __launch_bounds__(kColumnThreads)
    column_chunks_kernel(const float* partials, int64_t chunks, int64_t cols, void* out,
                         ElemType out_type) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float sum = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) sum += partials[k * cols + j];
  store_elem(out, out_type, j, load_elem(out, out_type, j) + sum);
}

}  // namespace

size_t column_sum_workspace_bytes(int64_t rows, int64_t cols, int outputs) {
  if (rows <= 0 || cols <= 0) return 0;
  const int64_t chunks = chunk_count(rows);
  if (chunks == 1) return 0;
  return static_cast<size_t>(chunks * cols * outputs) * sizeof(float);
}

void launch_column_sum(cudaStream_t s, const ColumnSumInput& in, DevPtr out0, DevPtr out1, void* ws,
                       const char* name) {
  if (in.rows == 0 || in.cols == 0) return;
  const int64_t chunks = chunk_count(in.rows);
  const int64_t rows_per_chunk = ceil_div(in.rows, chunks);
  float* partials = chunks > 1 ? static_cast<float*>(ws) : nullptr;
  const ElemType t0 = elem_type(out0.dt, name);
  const ElemType t1 = out1.ptr != nullptr ? elem_type(out1.dt, name) : ElemType::f32;
  const dim3 grid(static_cast<unsigned>(ceil_div(in.cols, kColumnThreads)),
                  static_cast<unsigned>(chunks));
  switch (in.term) {
    case ColumnTerm::dy:
      column_partials_kernel<ColumnTerm::dy>
          <<<grid, kColumnThreads, 0, s>>>(in, rows_per_chunk, partials, out0, t0, out1, t1);
      break;
    case ColumnTerm::layernorm_dw_db:
      column_partials_kernel<ColumnTerm::layernorm_dw_db>
          <<<grid, kColumnThreads, 0, s>>>(in, rows_per_chunk, partials, out0, t0, out1, t1);
      break;
    case ColumnTerm::rmsnorm_dw:
      column_partials_kernel<ColumnTerm::rmsnorm_dw>
          <<<grid, kColumnThreads, 0, s>>>(in, rows_per_chunk, partials, out0, t0, out1, t1);
      break;
  }
  SS_CUDA_CHECK_LAUNCH(name);
  if (partials == nullptr) return;
  const unsigned blocks = static_cast<unsigned>(ceil_div(in.cols, kColumnThreads));
  column_chunks_kernel<<<blocks, kColumnThreads, 0, s>>>(partials, chunks, in.cols, out0.ptr, t0);
  SS_CUDA_CHECK_LAUNCH(name);
  if (column_term_outputs(in.term) == 2) {
    column_chunks_kernel<<<blocks, kColumnThreads, 0, s>>>(partials + chunks * in.cols, chunks,
                                                           in.cols, out1.ptr, t1);
    SS_CUDA_CHECK_LAUNCH(name);
  }
}

}  // namespace shardscope::engine::cuda::detail
