// cuDNN 9's fused flash attention (AttentionKernel::cudnn), forward and
// backward, through cudnn-frontend's graph API (header-only; only
// attention_cudnn.cpp includes it). Same operands, layouts and semantics as
// attention_forward / attention_backward (ops.h):
//  - q [B, T, H*D], k and v [B, T, Hkv*D] with row strides q_stride /
//    kv_stride (packed GPT-2 c_attn: all 3*H*D), H % Hkv == 0 (grouped KV
//    heads: cuDNN reads Hkv heads, never a copy); causal; optional sliding
//    window W (query t sees keys j with t - W < j <= t: cuDNN's diagonal band
//    with left bound W, top-left aligned);
//  - out [B, T, H*D] dense; lse fp32 [B, H, T] = cuDNN's softmax statistics
//    ("Stats", natural log: max + log sum exp of the scaled scores), which
//    is exactly the engine's lse and layout, so no conversion;
//  - the backward accumulates (+=) into dq/dk/dv like every engine backward:
//    cuDNN overwrites its dQ/dK/dV, so they go to dense scratch in the
//    workspace and are added into the gradients (their own row strides).
//  - RoPE (rope = true, whole-head rotary): cuDNN's SDPA has no rotary
//    embedding, so q and k are rotated (the other kernels' fp32 math) into
//    dense scratch in the workspace, rounded to the dtype as the tensor-core
//    kernels round them, and cuDNN attends those; the backward rotates them
//    again and takes dQ, dK back through R^T as it adds them.
// Refused (std::invalid_argument naming the function and the field, before
// any CUDA call): dtype other than bf16/f16, head_dim not a multiple of 8 or
// above 256, partial rotary, softcap, strides or pointers not 16-byte aligned.
// fp32 and those shapes keep the simt / tensor_core kernels.
//
// Graphs are built and cached per CudnnAttentionKey (shape, strides, dtype,
// direction, window, scale, deterministic) by prepare(), which the executor
// calls in its start-up sizing pass; forward() and backward() only look a
// graph up and execute it (a key that was not prepared throws: no graph is
// ever built inside a step).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/cuda/ops/ops.h"

namespace shardscope::engine::cuda {

enum class CudnnDirection : uint8_t { forward, backward };

// What identifies one cuDNN SDPA graph. Two calls with equal keys run one
// graph; any field that changes the graph (or its tensors' strides) is here.
struct CudnnAttentionKey {
  CudnnDirection direction = CudnnDirection::forward;
  plan::DType dtype = plan::DType::bf16;
  int64_t batch = 0, seq = 0, n_head = 0, n_kv_head = 0, head_dim = 0;
  int64_t q_stride = 0, kv_stride = 0;  // row strides of q and of k, v (elements)
  int64_t sliding_window = 0;           // 0: causal only
  bool rope = false;                    // q, k rotated into scratch first (theta: not a graph
                                        // property, read from the call's shape)
  float scale = 0.0f;                   // the scale cuDNN multiplies q.k by (fp32)
  bool deterministic = false;           // backward only (false in every forward key)

  bool operator==(const CudnnAttentionKey& o) const;
  bool operator!=(const CudnnAttentionKey& o) const { return !(*this == o); }
  bool operator<(const CudnnAttentionKey& o) const;
};
// "forward bf16 B=2 T=17 H=4 Hkv=2 D=64 q_stride=256 kv_stride=128 window=0
// scale=0.125 deterministic=0": for errors and logs.
std::string cudnn_attention_key_text(const CudnnAttentionKey& key);

// The loaded libcudnn's version, "9.19.0" (cudnnGetVersion; needs no device).
std::string cudnn_version_text();

// Bytes every pointer and row handed to cuDNN must be aligned to.
constexpr int64_t kCudnnAlignBytes = 16;

// The key of a call, after every refusal that needs no device (see the file
// comment). `fn` prefixes the std::invalid_argument's message. `deterministic`
// is ignored (false) for the forward. Touches no CUDA API.
CudnnAttentionKey cudnn_attention_key(const char* fn, const AttentionShape& shape, plan::DType dt,
                                      int64_t q_stride, int64_t kv_stride, CudnnDirection direction,
                                      bool deterministic);

// The refusals check_attention_kernel makes for AttentionKernel::cudnn before
// any tensor exists (dtype bf16/f16; head_dim a multiple of 8, <= 256).
void require_cudnn_kernel(const char* fn, plan::DType dt, int64_t head_dim);
// attention_forward / attention_backward given AttentionKernel::cudnn:
// std::invalid_argument (it runs through CudnnAttention only).
void require_not_cudnn(const char* fn, AttentionKernel kernel);

// std::invalid_argument naming `fn` and `name` unless ptr is 16-byte aligned.
void require_cudnn_aligned(const char* fn, const char* name, const void* ptr);

// Scratch the backward needs besides cuDNN's workspace: dense dQ [B, T, H*D]
// and dK, dV [B, T, Hkv*D] in the key's dtype, each 256-byte aligned.
size_t cudnn_backward_scratch_bytes(const CudnnAttentionKey& key);
// Scratch of the rotated q [B, T, H*D] and k [B, T, Hkv*D] (both directions)
// when key.rope, each 256-byte aligned; 0 without RoPE.
size_t cudnn_rope_scratch_bytes(const CudnnAttentionKey& key);
// Row strides cuDNN reads q, k and v with: the call's, or the dense scratch
// rows (H*D, Hkv*D) of the rotated q and k under RoPE.
struct CudnnRowStrides {
  int64_t q = 0, k = 0, v = 0;
};
CudnnRowStrides cudnn_row_strides(const CudnnAttentionKey& key);

// One cuDNN handle and its graph cache; one per stream that runs attention
// (a handle is bound to a stream at each execute). Not thread-safe.
class CudnnAttention {
 public:
  // Touches no CUDA API: the handle is made by the first prepare().
  explicit CudnnAttention(bool deterministic_backward = false);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  bool deterministic_backward() const { return deterministic_; }

  // Builds the graph of `key` unless cached and returns the workspace the
  // call needs (cuDNN's own, plus the backward's gradient scratch): the
  // executor's sizing pass. Throws CudaError when cuDNN cannot be loaded or
  // has no engine for the graph (the message names the key and cuDNN's
  // reason), std::invalid_argument for a key cuDNN refuses while validating.
  size_t prepare(const CudnnAttentionKey& key);
  // Graphs built so far (each key once).
  size_t cached_graphs() const;

  // attention_forward's contract on a prepared key; ws holds prepare()'s bytes.
  void forward(cudaStream_t s, const AttentionShape& shape, const DevQkv& qkv, DevPtr out,
               float* lse, Workspace ws);
  // attention_backward's contract (accumulating) on a prepared key.
  void backward(cudaStream_t s, const AttentionShape& shape, const DevQkv& qkv, ConstDevPtr out,
                const float* lse, ConstDevPtr dout, const DevQkvGrad& grad, Workspace ws);

 private:
  struct Impl;
  bool deterministic_ = false;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardscope::engine::cuda
