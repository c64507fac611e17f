// The scaled-dot-product-attention kernel PyTorch runs for each attention op,
// and what that kernel keeps for backward.
//
// transformers 4.57 (integrations/sdpa_attention.py, masking_utils.py) calls
// torch.nn.functional.scaled_dot_product_attention with q [B, H, T, D] and
// either k, v [B, Hkv, T, D] and enable_gqa=True (no mask: is_causal), or,
// when a sliding window W <= T needs an explicit mask, k and v repeated to H
// heads by repeat_kv (a copy) and the mask [B, 1, T, T]. PyTorch 2.11 then
// picks the first kernel whose checks pass (aten/src/ATen/native/
// transformers/cuda/sdp_utils.cpp select_sdp_backend; sdp_utils_cpp.cpp on
// CPU); the rules of choose_sdpa_kernel below are those checks, for the
// inputs transformers passes (dense, dropout 0, equal head dims, T = S).
//
// Memory: the fused kernels (flash, memory-efficient, cuDNN, the CPU flash
// kernel) keep q, k, v, their output and the log-sum-exp (the graph's
// attention op: plan/graph_builder.cpp GraphBuilder::attention), and the
// explicit mask when there is one (FusedSdpaBytes below). The math fallback
// (attention.cpp _scaled_dot_product_attention_math) is a composite of
// autograd ops, which keep instead, in fp32 (it upcasts fp16/bf16 inputs:
// allowFP16BF16ReductionMathSDP is off by default): q * sqrt(scale) (a
// contiguous copy for the batched matmul), k^T * sqrt(scale), the softmax
// probabilities [B, H, T, T] and v repeated to H heads (v itself when it
// needs neither a repeat nor an upcast); it produces no log-sum-exp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/graph.h"

namespace shardscope::plan {

struct Policy;
struct UnitPlan;

// The device family a plan is made for (hardware model "device": sim/).
struct DeviceFamily {
  bool cuda = false;
  int sm = 0;  // cuda: compute capability, major * 10 + minor (sm_90: 90)
  bool operator==(const DeviceFamily& o) const { return cuda == o.cuda && sm == o.sm; }
  bool operator!=(const DeviceFamily& o) const { return !(*this == o); }
};
// "cpu" or "sm_<major><minor>" (sm_80, sm_90, sm_100); throws plan::Error
// naming `field` and the value otherwise.
DeviceFamily parse_device_family(const std::string& text, const std::string& field);
std::string device_family_name(const DeviceFamily& device);

// Policy key attention.sdpa_backend: automatic (PyTorch's own choice) or one
// backend forced, as torch.nn.attention.sdpa_kernel(backend) does.
enum class SdpaBackend : uint8_t { automatic, flash, efficient, cudnn, math };
const char* sdpa_backend_name(SdpaBackend backend);  // "auto", "flash", ...
// Throws plan::Error naming `field` on an unknown name.
SdpaBackend parse_sdpa_backend(const std::string& name, const std::string& field);

// The kernel that runs. none: not an attention op.
enum class SdpaKernel : uint8_t { none, flash_cpu, flash, efficient, cudnn, math };
// "none", "flash_cpu", "flash", "efficient", "cudnn", "math"
const char* sdpa_kernel_name(SdpaKernel kernel);

// What scaled_dot_product_attention receives from transformers for one
// attention op at sequence length T in the compute dtype.
struct SdpaCall {
  int64_t n_head = 1;
  int64_t kv_heads = 1;  // k and v heads at SDPA (n_head once repeat_kv has run)
  int64_t head_dim = 1;
  int64_t seq_len = 1;         // T = S
  DType dtype = DType::f32;    // q, k, v
  bool explicit_mask = false;  // a sliding window W <= T: transformers builds the mask
  // repeat_kv gave k and v n_head heads: grouped KV heads under a mask, or
  // always where the model's attention class repeats (attr repeat_kv)
  bool repeated_kv = false;
  // ... as copies: with one KV head its expand + reshape is a view (the
  // merged dims have sizes 1 and H / Hkv), so only 1 < Hkv < H copies
  bool kv_copied = false;
};
SdpaCall sdpa_call(const Op& attention, DType dtype, int64_t seq_len);

struct SdpaChoice {
  SdpaKernel kernel = SdpaKernel::none;
  // Why the kernels PyTorch tries before it refused ("cudnn: fp32 (needs
  // fp16 or bf16); ..."); empty when the first one runs.
  std::string refused;
};
// PyTorch 2.11's choice on `device`, or the forced backend. Throws
// plan::Error naming attention.sdpa_backend and the reason when the forced
// backend cannot run the call (PyTorch: "No available kernel").
SdpaChoice choose_sdpa_kernel(const SdpaCall& call, const DeviceFamily& device,
                              SdpaBackend backend);

// Per graph op (SdpaKernel::none for other ops): each attention op's call in
// its unit's compute dtype (plan/overrides.h) at the policy's seq_len, on
// policy.device with policy.sdpa_backend. Throws what choose_sdpa_kernel throws.
std::vector<SdpaChoice> sdpa_kernels(const Graph& graph, const Policy& policy,
                                     const UnitPlan& units);

// The math fallback's memory for one attention op, in bytes (compute_bytes:
// the op's compute dtype). Shapes: q, k, v [B, H, T, D] at SDPA, scores
// [B, H, T, T]; fp32 ("acc") whatever the compute dtype.
struct MathSdpaBytes {
  // Kept for backward, besides graph tensors: q * s (contiguous), k^T * s,
  // the probabilities, and v expanded (when it is not the graph's v).
  int64_t saved = 0;
  // Live during forward on top of the saved ones and the op's outputs: q * s
  // before its copy, k expanded (repeat_interleave), the scores and the
  // softmax before _safe_softmax's where; the causal mask [T, T]
  // (is_causal) or the explicit one converted to the compute dtype; the fp32
  // copies of fp16/bf16 q and k (and v when it is then repeated); repeat_kv's
  // k copy. Not counted: _safe_softmax's bool eq mask (1 byte per score).
  int64_t forward_temps = 0;
  // Live during backward on top of the saved ones: the probabilities'
  // gradient and the scores' gradient (_softmax_backward_data) at once.
  int64_t backward_temps = 0;
  // The same bytes as the tensors PyTorch allocates one by one (each a
  // caching-allocator block: the scores of a small model go to the small
  // pool where one block of their sum would open a 20 MiB segment); the
  // sums are forward_temps and backward_temps.
  std::vector<int64_t> forward_pieces, backward_pieces;
  // v at SDPA is the graph's v itself (no repeat, no upcast): the graph's v
  // input (the packed qkv for a packed op) stays saved.
  bool keeps_graph_v = false;
};
MathSdpaBytes math_sdpa_bytes(const SdpaCall& call, int64_t batch, int compute_bytes);

// A fused kernel's memory for one attention op besides the graph tensors it
// keeps, in bytes of the compute dtype (compute_bytes). Measured on the CPU
// flash kernel with saved-tensor hooks (torch 2.9.1, transformers 4.57.6):
// - repeated_kv (SdpaCall::kv_copied): repeat_kv's copies of k (roped) and
//   v, [B, H, T, D] each, are what SDPA keeps; the graph's k and v (the
//   KV-head tensors, or the packed projection v is a view of) are then not
//   kept. With one KV head the repeat is a view: nothing more is kept;
// - mask: scaled_dot_product_attention converts the boolean mask to the
//   compute dtype (convert_boolean_attn_mask: where(mask, 0, -inf)) on every
//   call, [B, 1, T, T], and the kernel keeps it for backward (the CPU flash
//   kernel's attn_mask, measured; memory-efficient's and cuDNN's attn_bias,
//   an input of their backward).
struct FusedSdpaBytes {
  int64_t repeated_kv = 0;
  int64_t mask = 0;
  int64_t saved() const;  // their sum
};
FusedSdpaBytes fused_sdpa_bytes(const SdpaCall& call, int64_t batch, int compute_bytes);

// The tensors an attention op keeps for backward under `kernel`. A fused
// kernel: its graph `saved` list, less, when k and v are copied, the graph
// tensors only their KV-head form lived in (k and v inputs; for a packed
// input with RoPE, the packed projection and the roped k: q is kept as its
// roped copy; a packed input without RoPE stays, q being a view of it). The
// math fallback: the graph's v source when the math path saves it
// (MathSdpaBytes::keeps_graph_v), else none.
std::vector<int> sdpa_graph_saved(const Op& attention, SdpaKernel kernel, const SdpaCall& call);

}  // namespace shardscope::plan
