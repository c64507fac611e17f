// Host-side argument checks and kernel parameters of the fused attention.
// Every check runs before any CUDA call, so bad arguments throw
// std::invalid_argument even on machines without a device.
#include <climits>
#include <cmath>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/cuda/check.h"
#include "engine/cuda/ops/attention_common.cuh"
#include "engine/cuda/ops/attention_cudnn.h"
#include "engine/cuda/ops/attention_tc.cuh"
#include "engine/cuda/ops/ops.h"

namespace shardscope::engine::cuda::attention_detail {

namespace {

[[noreturn]] void fail(const char* fn, const std::string& what) {
  throw std::invalid_argument(std::string(fn) + ": " + what);
}

}  // namespace

AttentionParams make_attention_params(const char* fn, const cpu::AttentionShape& shape,
                                      int64_t q_stride, int64_t kv_stride, int64_t head_stride) {
  const auto str = [](int64_t v) { return std::to_string(v); };
  if (shape.batch < 0) fail(fn, "batch = " + str(shape.batch) + " < 0");
  if (shape.seq < 0) fail(fn, "seq = " + str(shape.seq) + " < 0");
  if (shape.n_head < 1) fail(fn, "n_head = " + str(shape.n_head) + " < 1");
  if (shape.n_kv_head < 1) fail(fn, "n_kv_head = " + str(shape.n_kv_head) + " < 1");
  if (shape.head_dim < 1) fail(fn, "head_dim = " + str(shape.head_dim) + " < 1");
  if (shape.head_dim > kMaxHeadDim)
    fail(fn, "head_dim = " + str(shape.head_dim) + " > " + str(kMaxHeadDim) +
                 " (largest head_dim the CUDA attention supports)");
  if (shape.n_head % shape.n_kv_head != 0)
    fail(fn,
         "n_head " + str(shape.n_head) + " is not a multiple of n_kv_head " + str(shape.n_kv_head));
  if (!std::isfinite(shape.scale)) fail(fn, "scale is not finite");
  if (!(shape.softcap >= 0.0 && std::isfinite(shape.softcap)))
    fail(fn, "softcap must be finite and >= 0, got " + std::to_string(shape.softcap));
  if (shape.sliding_window < 0) fail(fn, "sliding_window = " + str(shape.sliding_window) + " < 0");
  if (shape.rotary_dim < 0 || shape.rotary_dim > shape.head_dim)
    fail(fn, "rotary_dim " + str(shape.rotary_dim) + " is not in [0, head_dim " +
                 str(shape.head_dim) + "]");
  const int64_t rotary_dim = shape.rotary_dim == 0 ? shape.head_dim : shape.rotary_dim;
  if (shape.rope) {
    if (rotary_dim % 2 != 0)
      fail(fn, std::string("rope needs an even ") +
                   (shape.rotary_dim == 0 ? "head_dim" : "rotary_dim") + ", got " +
                   str(rotary_dim));
    if (!(shape.rope_theta > 0.0 && std::isfinite(shape.rope_theta)))
      fail(fn, "rope_theta must be finite and > 0");
  }
  const int64_t hs = head_stride == 0 ? shape.head_dim : head_stride;
  if (hs < shape.head_dim)
    fail(fn, "head_stride " + str(hs) + " < head_dim " + str(shape.head_dim));
  if (q_stride < (shape.n_head - 1) * hs + shape.head_dim)
    fail(fn, "q_stride " + str(q_stride) + " < (n_head - 1) * head_stride + head_dim " +
                 str((shape.n_head - 1) * hs + shape.head_dim));
  if (kv_stride < (shape.n_kv_head - 1) * hs + shape.head_dim)
    fail(fn, "kv_stride " + str(kv_stride) + " < (n_kv_head - 1) * head_stride + head_dim " +
                 str((shape.n_kv_head - 1) * hs + shape.head_dim));
  // Positions are converted to float for RoPE and tile indices are int inside
  // a tile; keep T well inside both (2^24: every position exact in float).
  if (shape.seq > (int64_t{1} << 24))
    fail(fn, "seq = " + str(shape.seq) + " > 2^24 (largest sequence the CUDA attention supports)");

  AttentionParams p;
  p.batch = shape.batch;
  p.seq = shape.seq;
  p.n_head = shape.n_head;
  p.n_kv_head = shape.n_kv_head;
  p.group = shape.n_head / shape.n_kv_head;
  p.q_stride = p.dq_stride = q_stride;
  p.kv_stride = p.dkv_stride = kv_stride;
  p.head_stride = hs;
  p.window = shape.sliding_window;
  p.head_dim = static_cast<int>(shape.head_dim);
  p.scale = static_cast<float>(shape.scale);
  p.softcap = static_cast<float>(shape.softcap);
  p.rope = shape.rope;
  if (shape.rope) {
    p.rotary_half = static_cast<int>(rotary_dim / 2);
    for (int64_t i = 0; i < rotary_dim / 2; ++i)
      p.inv_freq[i] =
          static_cast<float>(1.0 / std::pow(shape.rope_theta, static_cast<double>(2 * i) /
                                                                  static_cast<double>(rotary_dim)));
  }
  return p;
}

void set_gradient_strides(const char* fn, AttentionParams& p, int64_t dq_stride,
                          int64_t dkv_stride) {
  const auto str = [](int64_t v) { return std::to_string(v); };
  const int64_t hs = p.head_stride;
  if (dq_stride < (p.n_head - 1) * hs + p.head_dim)
    fail(fn, "grad.q_stride " + str(dq_stride) + " < (n_head - 1) * head_stride + head_dim " +
                 str((p.n_head - 1) * hs + p.head_dim));
  if (dkv_stride < (p.n_kv_head - 1) * hs + p.head_dim)
    fail(fn, "grad.kv_stride " + str(dkv_stride) + " < (n_kv_head - 1) * head_stride + head_dim " +
                 str((p.n_kv_head - 1) * hs + p.head_dim));
  p.dq_stride = dq_stride;
  p.dkv_stride = dkv_stride;
}

void require_operand(const char* fn, const char* name, const void* ptr, plan::DType dt,
                     plan::DType expected, int64_t count) {
  if (count <= 0) return;
  if (ptr == nullptr)
    fail(fn, std::string(name) + " is null but " + std::to_string(count) + " elements are needed");
  if (dt != expected)
    fail(fn, std::string(name) + " has dtype " + plan::dtype_name(dt) + " but q has " +
                 plan::dtype_name(expected) + " (attention tensors share one dtype)");
}

void require_grid(const char* fn, int64_t blocks) {
  if (blocks > INT_MAX)
    fail(fn, "the launch needs " + std::to_string(blocks) + " blocks > 2^31 - 1 (grid.x limit)");
}

void set_dynamic_smem(const void* kernel, size_t bytes, const char* fn) {
  constexpr size_t kDefaultSmem = 48 * 1024;
  if (bytes <= kDefaultSmem) return;
  int device = 0, optin = 0;
  SS_CUDA_CHECK(cudaGetDevice(&device));
  // Once per (kernel, device): every attention launch comes through here, and
  // the attribute calls cost microseconds each.
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> done;
  std::lock_guard<std::mutex> lock(mutex);
  if (done.count({kernel, device}) != 0) return;
  SS_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > static_cast<size_t>(optin))
    throw CudaError(std::string(fn) + ": needs " + std::to_string(bytes) +
                    " bytes of shared memory per block, device " + std::to_string(device) +
                    " offers " + std::to_string(optin));
  SS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  done.insert({kernel, device});
}

}  // namespace shardscope::engine::cuda::attention_detail

namespace shardscope::engine::cuda {

void check_attention_kernel(const char* fn, AttentionKernel kernel, plan::DType dt,
                            int64_t head_dim) {
  if (kernel == AttentionKernel::tensor_core)
    attention_detail::require_tensor_core(fn, dt, head_dim);
  if (kernel == AttentionKernel::cudnn) require_cudnn_kernel(fn, dt, head_dim);
}

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::tensor_core:
      return "tensor-core";
    case AttentionKernel::cudnn:
      return "cudnn";
    case AttentionKernel::simt:
      break;
  }
  return "simt";
}

}  // namespace shardscope::engine::cuda
