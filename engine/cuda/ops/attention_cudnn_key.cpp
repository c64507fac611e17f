// The cuDNN attention's graph-cache key and its refusals (attention_cudnn.h):
// plain C++, no CUDA or cuDNN call, so every refusal is tested on machines
// without a device (tests/engine/cuda/test_cuda_attention_cudnn_args.cpp).
#include <climits>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>

#include "engine/cuda/ops/attention_cudnn.h"

namespace shardscope::engine::cuda {

namespace {

[[noreturn]] void fail(const char* fn, const std::string& what) {
  throw std::invalid_argument(std::string(fn) + ": AttentionKernel::cudnn " + what);
}

std::string str(int64_t v) {
  return std::to_string(v);
}

auto tie(const CudnnAttentionKey& k) {
  return std::tie(k.direction, k.dtype, k.batch, k.seq, k.n_head, k.n_kv_head, k.head_dim,
                  k.q_stride, k.kv_stride, k.sliding_window, k.rope, k.scale, k.deterministic);
}

constexpr size_t kScratchAlign = 256;
size_t align_up(size_t bytes) {
  return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
}

}  // namespace

bool CudnnAttentionKey::operator==(const CudnnAttentionKey& o) const {
  return tie(*this) == tie(o);
}

bool CudnnAttentionKey::operator<(const CudnnAttentionKey& o) const {
  return tie(*this) < tie(o);
}

std::string cudnn_attention_key_text(const CudnnAttentionKey& k) {
  std::ostringstream os;
  os << (k.direction == CudnnDirection::forward ? "forward" : "backward") << ' '
     << plan::dtype_name(k.dtype) << " B=" << k.batch << " T=" << k.seq << " H=" << k.n_head
     << " Hkv=" << k.n_kv_head << " D=" << k.head_dim << " q_stride=" << k.q_stride
     << " kv_stride=" << k.kv_stride << " window=" << k.sliding_window
     << " rope=" << (k.rope ? 1 : 0) << " scale=" << k.scale
     << " deterministic=" << (k.deterministic ? 1 : 0);
  return os.str();
}

CudnnAttentionKey cudnn_attention_key(const char* fn, const AttentionShape& shape, plan::DType dt,
                                      int64_t q_stride, int64_t kv_stride, CudnnDirection direction,
                                      bool deterministic) {
  require_cudnn_kernel(fn, dt, shape.head_dim);
  if (shape.batch < 1) fail(fn, "needs batch >= 1, got batch = " + str(shape.batch));
  if (shape.seq < 1) fail(fn, "needs seq >= 1, got seq = " + str(shape.seq));
  if (shape.n_head < 1) fail(fn, "needs n_head >= 1, got n_head = " + str(shape.n_head));
  if (shape.n_kv_head < 1)
    fail(fn, "needs n_kv_head >= 1, got n_kv_head = " + str(shape.n_kv_head));
  if (shape.n_head % shape.n_kv_head != 0)
    fail(fn, "needs n_head a multiple of n_kv_head, got n_head " + str(shape.n_head) +
                 " and n_kv_head " + str(shape.n_kv_head));
  if (shape.rope && !(shape.rope_theta > 0.0 && std::isfinite(shape.rope_theta)))
    fail(fn, "needs a finite rope_theta > 0, got " + std::to_string(shape.rope_theta));
  if (shape.rotary_dim != 0 && !(shape.rope && shape.rotary_dim == shape.head_dim))
    fail(fn, "cannot apply partial rotary (rotary_dim = " + str(shape.rotary_dim) +
                 ", head_dim = " + str(shape.head_dim) + "): the whole head rotates or none");
  if (shape.softcap != 0.0)
    fail(fn, "has no softcap (softcap = " + std::to_string(shape.softcap) +
                 "): cuDNN's SDPA graph here has no score modifier");
  if (shape.sliding_window < 0)
    fail(fn, "needs sliding_window >= 0, got sliding_window = " + str(shape.sliding_window));
  if (shape.sliding_window > INT_MAX)
    fail(fn, "supports sliding_window <= 2^31 - 1 (cuDNN's int left bound), got " +
                 str(shape.sliding_window));
  if (!std::isfinite(shape.scale)) fail(fn, "needs a finite scale");
  const int64_t elem = plan::dtype_bytes(dt);
  const int64_t align_elems = kCudnnAlignBytes / elem;
  if (q_stride < shape.n_head * shape.head_dim)
    fail(fn, "needs q_stride >= n_head * head_dim, got q_stride " + str(q_stride) + " < " +
                 str(shape.n_head * shape.head_dim));
  if (kv_stride < shape.n_kv_head * shape.head_dim)
    fail(fn, "needs kv_stride >= n_kv_head * head_dim, got kv_stride " + str(kv_stride) + " < " +
                 str(shape.n_kv_head * shape.head_dim));
  if (q_stride % align_elems != 0)
    fail(fn, "needs 16-byte aligned rows: q_stride " + str(q_stride) + " x " + str(elem) +
                 " bytes is not a multiple of " + str(kCudnnAlignBytes));
  if (kv_stride % align_elems != 0)
    fail(fn, "needs 16-byte aligned rows: kv_stride " + str(kv_stride) + " x " + str(elem) +
                 " bytes is not a multiple of " + str(kCudnnAlignBytes));

  CudnnAttentionKey k;
  k.direction = direction;
  k.dtype = dt;
  k.batch = shape.batch;
  k.seq = shape.seq;
  k.n_head = shape.n_head;
  k.n_kv_head = shape.n_kv_head;
  k.head_dim = shape.head_dim;
  k.q_stride = q_stride;
  k.kv_stride = kv_stride;
  // A window of T or more masks nothing causal attention does not: one graph.
  k.sliding_window = shape.sliding_window >= shape.seq ? 0 : shape.sliding_window;
  k.rope = shape.rope;
  k.scale = static_cast<float>(shape.scale);
  k.deterministic = direction == CudnnDirection::backward && deterministic;
  return k;
}

void require_cudnn_kernel(const char* fn, plan::DType dt, int64_t head_dim) {
  if (dt != plan::DType::bf16 && dt != plan::DType::f16)
    fail(fn, std::string("needs bf16 or f16 tensors, q has dtype ") + plan::dtype_name(dt) +
                 " (fp32 attention runs on AttentionKernel::simt)");
  if (head_dim < 8 || head_dim % 8 != 0)
    fail(fn, "needs a head_dim that is a positive multiple of 8, got head_dim = " + str(head_dim));
  if (head_dim > 256) fail(fn, "supports head_dim <= 256, got head_dim = " + str(head_dim));
}

void require_not_cudnn(const char* fn, AttentionKernel kernel) {
  if (kernel == AttentionKernel::cudnn)
    fail(fn,
         "runs through CudnnAttention (attention_cudnn.h: a cuDNN handle, graphs prepared at "
         "start-up and a workspace), not through this launcher");
}

void require_cudnn_aligned(const char* fn, const char* name, const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  if (address % static_cast<uintptr_t>(kCudnnAlignBytes) != 0) {
    std::ostringstream os;
    os << "needs 16-byte aligned pointers: " << name << " = " << ptr << " is "
       << address % static_cast<uintptr_t>(kCudnnAlignBytes) << " bytes past a 16-byte boundary";
    fail(fn, os.str());
  }
}

size_t cudnn_rope_scratch_bytes(const CudnnAttentionKey& k) {
  if (!k.rope) return 0;
  const size_t elem = plan::dtype_bytes(k.dtype);
  const size_t rows = static_cast<size_t>(k.batch * k.seq);
  return align_up(rows * static_cast<size_t>(k.n_head * k.head_dim) * elem) +
         align_up(rows * static_cast<size_t>(k.n_kv_head * k.head_dim) * elem);
}

CudnnRowStrides cudnn_row_strides(const CudnnAttentionKey& k) {
  if (k.rope) return {k.n_head * k.head_dim, k.n_kv_head * k.head_dim, k.kv_stride};
  return {k.q_stride, k.kv_stride, k.kv_stride};
}

size_t cudnn_backward_scratch_bytes(const CudnnAttentionKey& k) {
  const size_t elem = plan::dtype_bytes(k.dtype);
  const size_t rows = static_cast<size_t>(k.batch * k.seq);
  const size_t dq = rows * static_cast<size_t>(k.n_head * k.head_dim) * elem;
  const size_t dkv = rows * static_cast<size_t>(k.n_kv_head * k.head_dim) * elem;
  return align_up(dq) + 2 * align_up(dkv);
}

}  // namespace shardscope::engine::cuda
