// The cuDNN attention's own kernels. The backward's accumulation: cuDNN
// overwrites dense dQ, dK, dV in scratch; add_rows adds them into the
// engine's gradients, which may be packed ([B, T, 3*H*D], row stride 3*H*D)
// or separate (dense). RoPE: q and k rotated into dense scratch before cuDNN
// reads them, and the gradients w.r.t. the rotated rows rotated back (R^T)
// as they are added.
#include <algorithm>
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

namespace shardscope::engine::cuda::detail {

namespace {

// One thread per (row, head, pair i < D/2).
template <typename Src, typename Dst, bool kBack>
__global__ void rope_rows_kernel(const Src* __restrict__ src, int64_t src_stride,
                                 Dst* __restrict__ dst, int64_t dst_stride, int64_t n, int64_t seq,
                                 int64_t heads, int half, const cudnn_layout::RopeTable table) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += step) {
    const int64_t row = idx / (heads * half), rem = idx % (heads * half);
    const int64_t h = rem / half;
    const int i = static_cast<int>(rem % half);
    const int64_t t = row % seq;
    const int64_t head_dim = 2 * half;
    float c, s;
    sincosf(static_cast<float>(t) * table.inv_freq[i], &s, &c);
    const int64_t at_src = row * src_stride + h * head_dim + i;
    const int64_t at_dst = row * dst_stride + h * head_dim + i;
    const float x1 = Elem<Src>::load(src, at_src), x2 = Elem<Src>::load(src, at_src + half);
    float y1, y2;
    if (kBack) {
      cudnn_layout::rope_rotate_back(x1, x2, c, s, &y1, &y2);
      Elem<Dst>::store(dst, at_dst, Elem<Dst>::load(dst, at_dst) + y1);
      Elem<Dst>::store(dst, at_dst + half, Elem<Dst>::load(dst, at_dst + half) + y2);
    } else {
      cudnn_layout::rope_rotate(x1, x2, c, s, &y1, &y2);
      Elem<Dst>::store(dst, at_dst, y1);
      Elem<Dst>::store(dst, at_dst + half, y2);
    }
  }
}

template <bool kBack>
void launch_rope(cudaStream_t s, ConstDevPtr src, int64_t src_stride, DevPtr dst,
                 int64_t dst_stride, int64_t rows, int64_t seq, int64_t heads, int64_t head_dim,
                 const cudnn_layout::RopeTable& table, const char* name) {
  if (head_dim % 2 != 0 || head_dim / 2 > cudnn_layout::kRopeMaxPairs || seq < 1)
    throw std::invalid_argument(std::string(name) +
                                ": RoPE needs an even head_dim <= 256, seq >= 1");
  const int half = static_cast<int>(head_dim / 2);
  const int64_t n = rows * heads * half;
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 16);
  dispatch_elem(elem_type(src.dt, name), [&](auto src_tag) {
    using Src = decltype(src_tag);
    dispatch_elem(elem_type(dst.dt, name), [&](auto dst_tag) {
      using Dst = decltype(dst_tag);
      rope_rows_kernel<Src, Dst, kBack><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
          static_cast<const Src*>(src.ptr), src_stride, static_cast<Dst*>(dst.ptr), dst_stride, n,
          seq, heads, half, table);
    });
  });
  SS_CUDA_CHECK_LAUNCH(name);
}

}  // namespace

void launch_rope_rows(cudaStream_t s, ConstDevPtr src, int64_t src_stride, DevPtr dst, int64_t rows,
                      int64_t seq, int64_t heads, int64_t head_dim,
                      const cudnn_layout::RopeTable& table, const char* name) {
  launch_rope<false>(s, src, src_stride, dst, heads * head_dim, rows, seq, heads, head_dim, table,
                     name);
}

void launch_add_rope_back_rows(cudaStream_t s, ConstDevPtr src, DevPtr dst, int64_t dst_stride,
                               int64_t rows, int64_t seq, int64_t heads, int64_t head_dim,
                               const cudnn_layout::RopeTable& table, const char* name) {
  launch_rope<true>(s, src, heads * head_dim, dst, dst_stride, rows, seq, heads, head_dim, table,
                    name);
}

}  // namespace shardscope::engine::cuda::detail
