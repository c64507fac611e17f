// The cuDNN attention backward's accumulation: cuDNN overwrites dense dQ, dK,
// dV in scratch; this adds them into the engine's gradients, which may be
// packed ([B, T, 3*H*D], row stride 3*H*D) or separate (dense).
#include <climits>
#include <stdexcept>
#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/ops/attention_cudnn_layout.h"
#include "engine/cuda/ops/element.cuh"

namespace shardscope::engine::cuda::detail {

namespace {

template <typename Src, typename Dst>
__global__ void add_rows_kernel(const Src* __restrict__ src, int64_t n, int64_t width,
                                Dst* __restrict__ dst, int64_t dst_stride) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t j = cudnn_layout::strided_row_offset(i, width, dst_stride);
    Elem<Dst>::store(dst, j, Elem<Dst>::load(dst, j) + Elem<Src>::load(src, i));
  }
}

}  // namespace

void launch_add_rows(cudaStream_t s, ConstDevPtr src, int64_t rows, int64_t width, DevPtr dst,
                     int64_t dst_stride, const char* name) {
  if (rows < 0 || width < 0 || dst_stride < width)
    throw std::invalid_argument(std::string(name) + ": add_rows needs rows, width >= 0 and " +
                                "dst_stride >= width");
  const int64_t n = rows * width;
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 16);
  dispatch_elem(elem_type(src.dt, name), [&](auto src_tag) {
    using Src = decltype(src_tag);
    dispatch_elem(elem_type(dst.dt, name), [&](auto dst_tag) {
      using Dst = decltype(dst_tag);
      add_rows_kernel<Src, Dst><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
          static_cast<const Src*>(src.ptr), n, width, static_cast<Dst*>(dst.ptr), dst_stride);
    });
  });
  SS_CUDA_CHECK_LAUNCH(name);
}

}  // namespace shardscope::engine::cuda::detail
