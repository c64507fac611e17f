#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/exec/exec_kernels.h"
#include "engine/cuda/ops/element.cuh"

namespace shardscope::engine::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;  // grid-stride loops beyond this

int blocks_for(int64_t n) {
  return static_cast<int>(
      std::max<int64_t>(1, std::min(kMaxBlocks, (n + kThreads - 1) / kThreads)));
}

__device__ int64_t unsharded_index(const DevLayout& l, int64_t i) {
  if (l.identity) return i;
  const int64_t q = i / l.shard_numel;
  const int64_t off = i - q * l.shard_numel;
  const int64_t* shard_offset = l.table;
  const int64_t* chunk = l.table + l.count;
  const int64_t* unsharded = l.table + 2 * l.count;
  // First parameter whose chunk ends after `off` (chunks tile [0, s) in order,
  // so it exists and holds `off`).
  int lo = 0, hi = l.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (off < shard_offset[mid] + chunk[mid])
      hi = mid;
    else
      lo = mid + 1;
  }
  return unsharded[lo] + q * chunk[lo] + (off - shard_offset[lo]);
}

struct Sources {
  const void* ptr[3];
  ElemType type[3];
  int count;
};

__global__ void to_gathered_kernel(DevLayout l, Sources src, void* dst, ElemType dst_type,
                                   int64_t begin, int64_t count) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < count;
       j += int64_t{gridDim.x} * blockDim.x) {
    const int64_t u = unsharded_index(l, begin + j);
    float sum = 0.0f;
    for (int k = 0; k < src.count; ++k) sum += load_elem(src.ptr[k], src.type[k], u);
    store_elem(dst, dst_type, j, sum);
  }
}

constexpr int kPieceBatch = 8;

struct Pieces {
  const void* ptr[kPieceBatch];
  ElemType type[kPieceBatch];
  int64_t offset[kPieceBatch];
  int64_t numel[kPieceBatch];
  int count;
};

__global__ void pieces_to_gathered_kernel(DevLayout l, Pieces p, void* dst, ElemType dst_type) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < l.full_numel;
       j += int64_t{gridDim.x} * blockDim.x) {
    const int64_t u = unsharded_index(l, j);
    for (int k = 0; k < p.count; ++k) {
      const int64_t e = u - p.offset[k];
      if (e < 0 || e >= p.numel[k]) continue;
      store_elem(dst, dst_type, j, load_elem(dst, dst_type, j) + load_elem(p.ptr[k], p.type[k], e));
    }
  }
}

__global__ void to_unsharded_kernel(DevLayout l, const void* src, ElemType src_type, void* dst,
                                    ElemType dst_type) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < l.full_numel;
       i += int64_t{gridDim.x} * blockDim.x)
    store_elem(dst, dst_type, unsharded_index(l, i), load_elem(src, src_type, i));
}

__global__ void finish_cross_entropy_kernel(const double* micro, void* out, ElemType out_type,
                                            double* sum) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  store_elem(out, out_type, 0, static_cast<float>(*micro));
  if (sum) *sum += *micro;
}

__global__ void f64_to_f32_kernel(const double* src, float* dst) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *dst = static_cast<float>(*src);
}

__global__ void f32_to_f64_kernel(const float* src, double* dst) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *dst = static_cast<double>(*src);
}

void check_layout(const DevLayout& l, const char* what) {
  if (!l.identity && (l.table == nullptr || l.count <= 0 || l.shard_numel <= 0))
    throw std::invalid_argument(std::string(what) + ": layout without a parameter table");
}

}  // namespace

void unsharded_to_gathered(cudaStream_t stream, const DevLayout& layout, const ConstDevPtr* src,
                           int nsrc, DevPtr dst, int64_t begin, int64_t count) {
  check_layout(layout, "unsharded_to_gathered");
  if (nsrc < 1 || nsrc > 3)
    throw std::invalid_argument("unsharded_to_gathered: nsrc = " + std::to_string(nsrc) +
                                " outside [1, 3]");
  if (begin < 0 || count < 0 || begin + count > layout.full_numel)
    throw std::invalid_argument("unsharded_to_gathered: range [" + std::to_string(begin) + ", " +
                                std::to_string(begin + count) + ") outside the unit's " +
                                std::to_string(layout.full_numel) + " elements");
  if (count == 0) return;
  Sources s{};
  s.count = nsrc;
  for (int k = 0; k < nsrc; ++k) {
    s.ptr[k] = src[k].ptr;
    s.type[k] = elem_type(src[k].dt, "unsharded_to_gathered src");
  }
  const ElemType dt = elem_type(dst.dt, "unsharded_to_gathered dst");
  to_gathered_kernel<<<blocks_for(count), kThreads, 0, stream>>>(layout, s, dst.ptr, dt, begin,
                                                                 count);
  SS_CUDA_CHECK_LAUNCH("unsharded_to_gathered");
}

void params_to_gathered(cudaStream_t stream, const DevLayout& layout, const ConstDevPtr* src,
                        const int64_t* offset, const int64_t* numel, int count, DevPtr dst) {
  check_layout(layout, "params_to_gathered");
  if (layout.full_numel == 0) return;
  const ElemType dt = elem_type(dst.dt, "params_to_gathered dst");
  for (int first = 0; first < count; first += kPieceBatch) {
    Pieces p{};
    p.count = std::min(kPieceBatch, count - first);
    for (int k = 0; k < p.count; ++k) {
      p.ptr[k] = src[first + k].ptr;
      p.type[k] = elem_type(src[first + k].dt, "params_to_gathered src");
      p.offset[k] = offset[first + k];
      p.numel[k] = numel[first + k];
      if (p.offset[k] < 0 || p.numel[k] < 0 || p.offset[k] + p.numel[k] > layout.full_numel)
        throw std::invalid_argument("params_to_gathered: parameter range outside the unit");
    }
    pieces_to_gathered_kernel<<<blocks_for(layout.full_numel), kThreads, 0, stream>>>(layout, p,
                                                                                      dst.ptr, dt);
    SS_CUDA_CHECK_LAUNCH("params_to_gathered");
  }
}

void gathered_to_unsharded(cudaStream_t stream, const DevLayout& layout, ConstDevPtr src,
                           DevPtr dst) {
  check_layout(layout, "gathered_to_unsharded");
  if (layout.full_numel == 0) return;
  const ElemType st = elem_type(src.dt, "gathered_to_unsharded src");
  const ElemType dt = elem_type(dst.dt, "gathered_to_unsharded dst");
  to_unsharded_kernel<<<blocks_for(layout.full_numel), kThreads, 0, stream>>>(layout, src.ptr, st,
                                                                              dst.ptr, dt);
  SS_CUDA_CHECK_LAUNCH("gathered_to_unsharded");
}

void finish_cross_entropy(cudaStream_t stream, const double* micro, DevPtr loss_out,
                          double* loss_sum) {
  const ElemType t = elem_type(loss_out.dt, "finish_cross_entropy loss");
  finish_cross_entropy_kernel<<<1, 1, 0, stream>>>(micro, loss_out.ptr, t, loss_sum);
  SS_CUDA_CHECK_LAUNCH("finish_cross_entropy");
}

void f64_to_f32(cudaStream_t stream, const double* src, float* dst) {
  f64_to_f32_kernel<<<1, 1, 0, stream>>>(src, dst);
  SS_CUDA_CHECK_LAUNCH("f64_to_f32");
}

void f32_to_f64(cudaStream_t stream, const float* src, double* dst) {
  f32_to_f64_kernel<<<1, 1, 0, stream>>>(src, dst);
  SS_CUDA_CHECK_LAUNCH("f32_to_f64");
}

}  // namespace shardscope::engine::cuda
