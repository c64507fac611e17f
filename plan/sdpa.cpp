#include "plan/sdpa.h"

#include <algorithm>
#include <stdexcept>

#include "plan/error.h"
#include "plan/json_input.h"
#include "plan/overrides.h"
#include "plan/policy.h"
#include "plan/units.h"

namespace shardscope::plan {
namespace {

std::string sm_name(int sm) {
  return "sm_" + std::to_string(sm);
}

bool half_dtype(DType d) {
  return d == DType::bf16 || d == DType::f16;
}

// Each returns why PyTorch 2.11's can_use_<kernel> refuses the call on
// CUDA arch `sm` (empty: it runs). Only the checks the calls transformers
// makes can fail are here (dense inputs, dropout 0, equal head dims,
// seqlen_q = seqlen_k, last dim contiguous).

// can_use_cudnn_attention: check_dtypes_low_precision,
// check_cudnn_hardware_support, check_cudnn_tensor_shapes (cuDNN >= 9.10:
// head_dim up to 256 on sm_90 exactly, else 128; multiple of 8; S != 1).
// Grouped KV heads and explicit masks are supported.
std::string cudnn_refusal(const SdpaCall& c, int sm) {
  if (sm < 80 || sm > 121) return sm_name(sm) + " is outside cuDNN attention's sm_80..sm_121";
  if (!half_dtype(c.dtype)) return std::string(dtype_name(c.dtype)) + " (needs fp16 or bf16)";
  const int64_t limit = sm == 90 ? 256 : 128;
  if (c.head_dim > limit)
    return "head_dim " + std::to_string(c.head_dim) + " above " + std::to_string(limit);
  if (c.head_dim % 8 != 0) return "head_dim " + std::to_string(c.head_dim) + " not a multiple of 8";
  if (c.seq_len == 1) return "key sequence length 1";
  return {};
}

// can_use_flash_attention: check_for_attn_mask, check_head_dim_size_flash
// (<= 256), check_flash_attention_hardware_support (sm_80..sm_121),
// check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120,
// check_dtypes_flash_attention (fp16, bf16). Grouped KV heads are supported.
std::string flash_refusal(const SdpaCall& c, int sm) {
  if (sm < 80 || sm > 121) return sm_name(sm) + " is outside flash attention's sm_80..sm_121";
  if (c.explicit_mask) return "an explicit attention mask (sliding window <= T)";
  if (c.head_dim > 256) return "head_dim " + std::to_string(c.head_dim) + " above 256";
  const bool sm86_89_120 = (sm >= 86 && sm <= 89) || (sm >= 120 && sm <= 121);
  if (sm86_89_120 && c.head_dim > 192 && c.head_dim <= 224)
    return "training with head_dim in (192, 224] on " + sm_name(sm);
  if (!half_dtype(c.dtype)) return std::string(dtype_name(c.dtype)) + " (needs fp16 or bf16)";
  return {};
}

// can_use_mem_efficient_attention: check_mem_efficient_hardware_support
// (sm_50..sm_121), check_head_dim_size_mem_efficient (minimum_gemm_alignment:
// 8 for fp16/bf16 from sm_70 on, 4 for fp32 from sm_80 on, else 1),
// check_batch_size_and_num_heads_dense<false> (no grouped KV heads), dtypes
// fp16/fp32/bf16 from sm_80 on, fp16/fp32 below.
std::string efficient_refusal(const SdpaCall& c, int sm) {
  if (sm < 50 || sm > 121) return sm_name(sm) + " is outside memory-efficient's sm_50..sm_121";
  const bool half = half_dtype(c.dtype);
  const int64_t alignment = half ? (sm >= 70 ? 8 : 1) : (sm >= 80 ? 4 : 1);
  if (c.head_dim % alignment != 0)
    return "head_dim " + std::to_string(c.head_dim) + " not a multiple of " +
           std::to_string(alignment);
  if (c.kv_heads != c.n_head)
    return "grouped KV heads (" + std::to_string(c.n_head) + " query heads over " +
           std::to_string(c.kv_heads) + "; no enable_gqa support)";
  const bool ok =
      c.dtype == DType::f16 || c.dtype == DType::f32 || (sm >= 80 && c.dtype == DType::bf16);
  if (!ok)
    return std::string(dtype_name(c.dtype)) + " (not a memory-efficient dtype on " + sm_name(sm) +
           ")";
  return {};
}

std::string refusal(SdpaKernel k, const SdpaCall& c, int sm) {
  switch (k) {
    case SdpaKernel::cudnn:
      return cudnn_refusal(c, sm);
    case SdpaKernel::flash:
      return flash_refusal(c, sm);
    case SdpaKernel::efficient:
      return efficient_refusal(c, sm);
    default:
      return {};
  }
}

// check_prefer_cudnn_attention: cuDNN first on sm_90/sm_100/sm_103 with
// cuDNN > 9.15 (torch 2.11's cu130 wheels ship 9.19: the references'
// `cudnn` 91900); otherwise the context's default order (flash, efficient,
// math, cudnn: math always runs, so cuDNN is never reached).
bool prefers_cudnn(int sm) {
  const int major = sm / 10, minor = sm % 10;
  return (major == 9 || major == 10) && (minor == 0 || minor == 3);
}

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw std::overflow_error("math SDPA sizes overflow int64");
  return r;
}
int64_t checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw std::overflow_error("math SDPA sizes overflow int64");
  return r;
}

}  // namespace

DeviceFamily parse_device_family(const std::string& text, const std::string& field) {
  if (text == "cpu") return DeviceFamily{};
  const std::string digits = text.size() > 3 ? text.substr(3) : std::string();
  const bool numeric = !digits.empty() && digits.size() <= 3 &&
                       digits.find_first_not_of("0123456789") == std::string::npos;
  if (text.rfind("sm_", 0) != 0 || !numeric || std::stoi(digits) < 10)
    throw Error(field +
                ": expected \"cpu\" or a CUDA arch \"sm_<major><minor>\" (sm_80, sm_90), got \"" +
                quote_input(text) + "\"");
  return DeviceFamily{true, std::stoi(digits)};
}

std::string device_family_name(const DeviceFamily& d) {
  return d.cuda ? sm_name(d.sm) : "cpu";
}

const char* sdpa_backend_name(SdpaBackend b) {
  switch (b) {
    case SdpaBackend::automatic:
      return "auto";
    case SdpaBackend::flash:
      return "flash";
    case SdpaBackend::efficient:
      return "efficient";
    case SdpaBackend::cudnn:
      return "cudnn";
    case SdpaBackend::math:
      return "math";
  }
  return "?";
}

SdpaBackend parse_sdpa_backend(const std::string& name, const std::string& field) {
  for (SdpaBackend b : {SdpaBackend::automatic, SdpaBackend::flash, SdpaBackend::efficient,
                        SdpaBackend::cudnn, SdpaBackend::math})
    if (name == sdpa_backend_name(b)) return b;
  throw Error(field + ": unknown value \"" + name +
              "\" (use auto, flash, efficient, cudnn or math)");
}

const char* sdpa_kernel_name(SdpaKernel k) {
  switch (k) {
    case SdpaKernel::none:
      return "none";
    case SdpaKernel::flash_cpu:
      return "flash_cpu";
    case SdpaKernel::flash:
      return "flash";
    case SdpaKernel::efficient:
      return "efficient";
    case SdpaKernel::cudnn:
      return "cudnn";
    case SdpaKernel::math:
      return "math";
  }
  return "?";
}

SdpaCall sdpa_call(const Op& op, DType dtype, int64_t seq_len) {
  SdpaCall c;
  c.n_head = op.attrs.n_head.value_or(1);
  const int64_t kv = op.attrs.n_kv_head.value_or(c.n_head);
  c.head_dim = op.attrs.head_dim.value_or(1);
  c.seq_len = seq_len;
  c.dtype = dtype;
  // masking_utils._ignore_causal_mask_sdpa drops the mask only when
  // kv_length < local_attention_size (and no padding, as here).
  c.explicit_mask = op.attrs.sliding_window && seq_len >= *op.attrs.sliding_window;
  // use_gqa_in_sdpa: enable_gqa only without a mask; else repeat_kv. Some
  // attention classes repeat unconditionally (attr repeat_kv).
  c.repeated_kv = (c.explicit_mask || op.attrs.repeat_kv.value_or(false)) && kv < c.n_head;
  c.kv_copied = c.repeated_kv && kv > 1;
  c.kv_heads = c.repeated_kv ? c.n_head : kv;
  return c;
}

SdpaChoice choose_sdpa_kernel(const SdpaCall& c, const DeviceFamily& device, SdpaBackend backend) {
  const std::string forced = "policy: attention.sdpa_backend: \"" +
                             std::string(sdpa_backend_name(backend)) + "\" cannot run on " +
                             device_family_name(device) + ": ";
  if (!device.cuda) {
    // select_sdp_backend_cpp: the CPU flash kernel, else math. The flash
    // kernel's checks (dtype float/double/bf16/half, dropout 0, head dims
    // equal) pass for every call transformers makes.
    switch (backend) {
      case SdpaBackend::automatic:
      case SdpaBackend::flash:
        return {SdpaKernel::flash_cpu, {}};
      case SdpaBackend::math:
        return {SdpaKernel::math, {}};
      case SdpaBackend::efficient:
      case SdpaBackend::cudnn:
        throw Error(forced + "no such CPU kernel (PyTorch's CPU backends are flash and math)");
    }
  }
  const int sm = device.sm;
  if (backend != SdpaBackend::automatic) {
    const SdpaKernel k = backend == SdpaBackend::flash       ? SdpaKernel::flash
                         : backend == SdpaBackend::efficient ? SdpaKernel::efficient
                         : backend == SdpaBackend::cudnn     ? SdpaKernel::cudnn
                                                             : SdpaKernel::math;
    const std::string why = refusal(k, c, sm);
    if (!why.empty()) throw Error(forced + why);
    return {k, {}};
  }
  std::vector<SdpaKernel> order = {SdpaKernel::flash, SdpaKernel::efficient, SdpaKernel::math};
  if (prefers_cudnn(sm)) order.insert(order.begin(), SdpaKernel::cudnn);
  SdpaChoice choice;
  for (SdpaKernel k : order) {
    const std::string why = refusal(k, c, sm);
    if (why.empty()) {
      choice.kernel = k;
      return choice;
    }
    if (!choice.refused.empty()) choice.refused += "; ";
    choice.refused += std::string(sdpa_kernel_name(k)) + ": " + why;
  }
  return choice;  // unreachable: math always runs
}

std::vector<SdpaChoice> sdpa_kernels(const Graph& graph, const Policy& policy,
                                     const UnitPlan& units) {
  std::vector<SdpaChoice> out(graph.ops.size());
  const std::vector<UnitSettings> us = unit_settings(policy, units);
  const int64_t seq = resolve_seq_len(policy, graph);
  for (size_t o = 0; o < graph.ops.size(); ++o) {
    const Op& op = graph.ops[o];
    if (op.type != OpType::attention) continue;
    const DType dtype = us[static_cast<size_t>(units.op_unit[o])].param_dtype;
    try {
      out[o] = choose_sdpa_kernel(sdpa_call(op, dtype, seq), policy.device, policy.sdpa_backend);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + " (attention op " + op.name + ", " + dtype_name(dtype) +
                  ")");
    }
  }
  return out;
}

MathSdpaBytes math_sdpa_bytes(const SdpaCall& c, int64_t batch, int compute_bytes) {
  MathSdpaBytes m;
  const int64_t acc = compute_bytes < 4 ? 4 : compute_bytes;  // fp16/bf16 upcast to fp32
  const bool lowp = compute_bytes < 4;
  const bool gqa_repeat = c.kv_heads < c.n_head;  // enable_gqa: repeat_interleave in math
  const int64_t bht = checked_mul(checked_mul(batch, c.n_head), c.seq_len);
  const int64_t bhtd = checked_mul(bht, c.head_dim);
  const int64_t bkvtd =
      checked_mul(checked_mul(checked_mul(batch, c.kv_heads), c.seq_len), c.head_dim);
  const int64_t bhtt = checked_mul(bht, c.seq_len);
  m.keeps_graph_v = !gqa_repeat && !lowp && !c.repeated_kv;
  // q * s, k^T * s, probabilities, v expanded (or upcast, or repeat_kv's copy).
  m.saved = checked_mul(checked_add(checked_mul(2, bhtd), bhtt), acc);
  if (!m.keeps_graph_v) m.saved = checked_add(m.saved, checked_mul(bhtd, acc));
  std::vector<int64_t>& fwd = m.forward_pieces;
  fwd = {checked_mul(bhtd, acc), checked_mul(bhtt, acc),
         checked_mul(bhtt, acc)};                         // q * s, scores, softmax
  if (gqa_repeat) fwd.push_back(checked_mul(bhtd, acc));  // k expanded
  const int64_t tt = checked_mul(c.seq_len, c.seq_len);
  fwd.push_back(c.explicit_mask ? checked_mul(checked_mul(batch, tt), compute_bytes)
                                : checked_mul(tt, acc));
  if (lowp) {
    fwd.push_back(checked_mul(bhtd, acc));                   // q upcast
    fwd.push_back(checked_mul(bkvtd, acc));                  // k upcast
    if (gqa_repeat) fwd.push_back(checked_mul(bkvtd, acc));  // v upcast, then repeated
  }
  if (c.repeated_kv) {
    fwd.push_back(checked_mul(bhtd, compute_bytes));            // repeat_kv's k
    if (lowp) fwd.push_back(checked_mul(bhtd, compute_bytes));  // and v, upcast after
  }
  for (int64_t b : m.forward_pieces) m.forward_temps = checked_add(m.forward_temps, b);
  m.backward_pieces = {checked_mul(bhtt, acc), checked_mul(bhtt, acc)};
  m.backward_temps = checked_mul(checked_mul(2, bhtt), acc);
  return m;
}

int64_t FusedSdpaBytes::saved() const {
  return checked_add(repeated_kv, mask);
}

FusedSdpaBytes fused_sdpa_bytes(const SdpaCall& c, int64_t batch, int compute_bytes) {
  FusedSdpaBytes f;
  if (c.kv_copied)
    f.repeated_kv = checked_mul(
        checked_mul(checked_mul(checked_mul(checked_mul(2, batch), c.n_head), c.seq_len),
                    c.head_dim),
        compute_bytes);
  if (c.explicit_mask)
    f.mask = checked_mul(checked_mul(checked_mul(batch, c.seq_len), c.seq_len), compute_bytes);
  return f;
}

std::vector<int> sdpa_graph_saved(const Op& op, SdpaKernel kernel, const SdpaCall& call) {
  if (kernel != SdpaKernel::math) {
    if (!call.kv_copied) return op.saved;
    std::vector<int> dropped;
    const bool packed = op.attrs.qkv_packed.value_or(false);
    if (!packed && op.inputs.size() == 3) {
      dropped = {op.inputs[1], op.inputs[2]};
    } else if (packed && op.attrs.rope.value_or(false) && op.outputs.size() >= 4) {
      dropped = {op.inputs[0], op.outputs[3]};  // the packed projection, k_roped
    }
    std::vector<int> kept;
    for (int t : op.saved)
      if (std::find(dropped.begin(), dropped.end(), t) == dropped.end()) kept.push_back(t);
    return kept;
  }
  const bool lowp = dtype_bytes(call.dtype) < 4;
  const bool keeps_v = call.kv_heads == call.n_head && !lowp && !call.repeated_kv;
  if (!keeps_v || op.inputs.empty()) return {};
  return {op.attrs.qkv_packed.value_or(false) ? op.inputs[0] : op.inputs.back()};
}

}  // namespace shardscope::plan
