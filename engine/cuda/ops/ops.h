// CUDA ops: the device twins of engine/cpu/ops.h and optim.h, same names,
// same semantics and shapes (read that header for each op's definition):
//  - forward functions overwrite their outputs; backward functions
//    accumulate (+=) into every gradient (callers zero a gradient buffer
//    before its first producer, with cudaMemsetAsync);
//  - every launcher takes the stream it runs on, opens an NVTX range named
//    after the op (nvtx3), launches asynchronously (never synchronises the
//    host) and checks the launch (SS_CUDA_CHECK_LAUNCH); invalid sizes throw
//    std::invalid_argument naming the function and the argument, before any
//    launch;
//  - DevPtr operands may be f32, bf16 or f16 independently of each other
//    (math in fp32, results rounded to the operand's dtype); pointers typed
//    float* / double* / int64_t* are fp32 / fp64 / int64 device arrays;
//  - scalars that the CPU versions return (loss, norms, inf flags) are
//    accumulated into device scalars instead, so that a training step is
//    issued without host synchronisation; the executor reads them once at
//    the end of the step.
//  - Results may differ from the CPU op in the last bits (different
//    summation order; atomics in some backward reductions): tests compare
//    with `tol + |ref| * eps`.
// Implementations: one kernel family per file under engine/cuda/ops/.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cpu/ops.h"
#include "engine/cpu/optim.h"
#include "engine/cuda/ops/dev_ptr.h"

namespace shardscope::engine::cuda {

using cpu::AdamWParams;
using cpu::AttentionShape;
using cpu::SgdParams;
using cpu::WeightLayout;

// ---- GEMM (gemm.cu): cuBLASLt, fp32 accumulation ----------------------------------
// One Blas per stream that runs GEMMs: owns the cuBLASLt handle and that
// stream's workspace (cuBLASLt workspaces must not be shared by concurrent
// GEMMs). Throws CudaError when cuBLASLt cannot be initialised.
class Blas {
 public:
  explicit Blas(size_t workspace_bytes = size_t{32} << 20);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  void* handle() const { return handle_; }  // cublasLtHandle_t
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  void* handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

// y[N, out] = x @ W^T + b (layout as cpu::linear_forward). x, w, y of one
// dtype (f32: TF32 off, exact fp32 GEMM; bf16/f16: tensor cores) and bias of
// any; mixed x/w dtypes throw std::invalid_argument (the plan's casts make
// them equal).
void linear_forward(Blas& blas, cudaStream_t s, ConstDevPtr x, ConstDevPtr w, ConstDevPtr bias,
                    DevPtr y, int64_t n, int64_t in, int64_t out, WeightLayout layout);
// dx += dy @ W, dw += dy^T x, dbias += colsum(dy); dx.ptr / dbias.ptr may be null.
void linear_backward(Blas& blas, cudaStream_t s, ConstDevPtr x, ConstDevPtr w, ConstDevPtr dy,
                     DevPtr dx, DevPtr dw, DevPtr dbias, int64_t n, int64_t in, int64_t out,
                     WeightLayout layout, Workspace ws);
size_t linear_backward_workspace_bytes(int64_t n, int64_t in, int64_t out);

// ---- embedding (embedding.cu) -------------------------------------------------------
// ids: device int64 [n] (nullptr: positions 0..n-1). An id outside [0, rows)
// sets *error_flag (device int32, when non-null) to 1 + the row index that
// held it and writes zeros for that row: the executor checks the flag at the
// end of the step and reports the bad id there.
void embedding_forward(cudaStream_t s, const int64_t* ids, ConstDevPtr table, DevPtr out, int64_t n,
                       int64_t rows, int64_t dim, int32_t* error_flag);
// padding_idx >= 0: rows whose id is padding_idx add nothing (that table row
// gets no gradient, as cpu::embedding_backward); -1: none; else in [0, rows).
// A table read from row r on (OPT's learned positions, position_offset r) is
// the caller's pointer table + r * dim with rows - r rows.
void embedding_backward(cudaStream_t s, const int64_t* ids, ConstDevPtr dout, DevPtr dtable,
                        int64_t n, int64_t rows, int64_t dim, Workspace ws,
                        int64_t padding_idx = -1);
size_t embedding_backward_workspace_bytes(int64_t n, int64_t rows, int64_t dim);

// ---- normalisation (norm.cu): mean, rstd are fp32 [n] -----------------------------------
void layernorm_forward(cudaStream_t s, ConstDevPtr x, ConstDevPtr w, ConstDevPtr b, DevPtr y,
                       float* mean, float* rstd, int64_t n, int64_t c, double eps);
void layernorm_backward(cudaStream_t s, ConstDevPtr x, ConstDevPtr w, const float* mean,
                        const float* rstd, ConstDevPtr dy, DevPtr dx, DevPtr dw, DevPtr db,
                        int64_t n, int64_t c, Workspace ws);
size_t layernorm_backward_workspace_bytes(int64_t n, int64_t c);
// y = x * rstd * (weight_offset + w) (Gemma: weight_offset 1; finite); dw is
// unchanged by the offset. Per-head RMSNorm (Qwen3's q_norm) is n = B*T*H
// rows of c = head_dim.
void rmsnorm_forward(cudaStream_t s, ConstDevPtr x, ConstDevPtr w, DevPtr y, float* rstd, int64_t n,
                     int64_t c, double eps, double weight_offset = 0.0);
void rmsnorm_backward(cudaStream_t s, ConstDevPtr x, ConstDevPtr w, const float* rstd,
                      ConstDevPtr dy, DevPtr dx, DevPtr dw, int64_t n, int64_t c, Workspace ws,
                      double weight_offset = 0.0);
size_t rmsnorm_backward_workspace_bytes(int64_t n, int64_t c);

// ---- attention (attention.cu): fused, tiled, online softmax; never T x T -----------------
// q/k/v of one dtype; lse fp32 [B, H, T]. Strides as cpu::QkvView and
// cpu::QkvGrad: the gradients have their own row strides (q, k and v read
// from [B, T, H*D] copies, their gradients written into a packed buffer) and
// the inputs' head_stride (0: head_dim; GPT-NeoX's per-head qkv: 3*D).
// The shape's softcap, sliding_window and rotary_dim are cpu::attention's.
struct DevQkv {
  ConstDevPtr q, k, v;
  int64_t q_stride = 0, kv_stride = 0;
  int64_t head_stride = 0;
};
struct DevQkvGrad {
  DevPtr dq, dk, dv;
  int64_t q_stride = 0, kv_stride = 0;
  int64_t head_stride = 0;  // must equal the inputs'
};
// Kernel family. simt: fp32 math on the CUDA cores, every dtype and head_dim
// <= 256. tensor_core: WMMA (bf16/f16 operands rounded in shared memory, fp32
// accumulation, sm_80+) for bf16/f16 tensors and head_dim a multiple of 16,
// <= 128; anything else throws std::invalid_argument (never falls back).
// Both read and write the same layouts, lse and workspace, so a forward of
// one family pairs with a backward of the other. cudnn: cuDNN 9's fused flash
// attention (bf16/f16, head_dim a multiple of 8 <= 256, whole-head RoPE
// applied before it, no partial rotary or softcap): not through
// attention_forward/backward (which refuse it) but CudnnAttention
// (attention_cudnn.h), which owns a cuDNN handle and its graphs; its lse is
// the same, its workspace its own.
enum class AttentionKernel { simt, tensor_core, cudnn };
// "simt" / "tensor-core" / "cudnn" (the spelling of run's --attention-kernel).
const char* attention_kernel_name(AttentionKernel kernel);
// Throws std::invalid_argument naming `fn` when `kernel` cannot run q of dtype
// `dt` with `head_dim` (the refusals of attention_forward/backward, checked
// before any tensor exists). Touches no CUDA API.
void check_attention_kernel(const char* fn, AttentionKernel kernel, plan::DType dt,
                            int64_t head_dim);
void attention_forward(cudaStream_t s, const AttentionShape& shape, const DevQkv& qkv, DevPtr out,
                       float* lse, AttentionKernel kernel = AttentionKernel::simt);
void attention_backward(cudaStream_t s, const AttentionShape& shape, const DevQkv& qkv,
                        ConstDevPtr out, const float* lse, ConstDevPtr dout, const DevQkvGrad& grad,
                        Workspace ws, AttentionKernel kernel = AttentionKernel::simt);
// Valid for both kernel families.
size_t attention_backward_workspace_bytes(const AttentionShape& shape);

// ---- pointwise (pointwise.cu) ------------------------------------------------------------
void gelu_forward(cudaStream_t s, ConstDevPtr x, DevPtr y, int64_t n, bool tanh_approximation);
void gelu_backward(cudaStream_t s, ConstDevPtr x, ConstDevPtr dy, DevPtr dx, int64_t n,
                   bool tanh_approximation);
void relu_forward(cudaStream_t s, ConstDevPtr x, DevPtr y, int64_t n);
void relu_backward(cudaStream_t s, ConstDevPtr y, ConstDevPtr dy, DevPtr dx, int64_t n);
void swiglu_forward(cudaStream_t s, ConstDevPtr gate, ConstDevPtr up, DevPtr y, int64_t n);
void swiglu_backward(cudaStream_t s, ConstDevPtr gate, ConstDevPtr up, ConstDevPtr dy, DevPtr dgate,
                     DevPtr dup, int64_t n);
void residual_forward(cudaStream_t s, ConstDevPtr a, ConstDevPtr b, DevPtr y, int64_t n,
                      int64_t b_n);
// da.ptr or db.ptr may be null. db (broadcast, b_n < n) sums rows in fp32.
void residual_backward(cudaStream_t s, ConstDevPtr dy, DevPtr da, DevPtr db, int64_t n, int64_t b_n,
                       Workspace ws);
size_t residual_backward_workspace_bytes(int64_t n, int64_t b_n);

// ---- gated MLP, scale, softcap (gated.cu) -----------------------------------------------
// y = act(gate) * up over rows x width (cpu::gated_forward): gate and up rows
// start `stride` elements apart (Phi-3's packed gate_up [N, 2F]: up = gate +
// F, stride 2F; separate tensors: one row of rows * width); y, dy dense;
// dgate / dup laid out as gate / up. stride < width throws.
void gated_forward(cudaStream_t s, ConstDevPtr gate, ConstDevPtr up, DevPtr y, int64_t rows,
                   int64_t width, int64_t stride, cpu::GateActivation act);
void gated_backward(cudaStream_t s, ConstDevPtr gate, ConstDevPtr up, ConstDevPtr dy, DevPtr dgate,
                    DevPtr dup, int64_t rows, int64_t width, int64_t stride,
                    cpu::GateActivation act);
// y = x * scale; dx += dy * scale (the caller rounds scale as the plan's dtype).
void scale_forward(cudaStream_t s, ConstDevPtr x, DevPtr y, int64_t n, float scale);
void scale_backward(cudaStream_t s, ConstDevPtr dy, DevPtr dx, int64_t n, float scale);
// th = tanh(x / cap), y = cap * th (th kept for backward); dx += dy * (1 - th^2).
// cap finite and > 0.
void softcap_forward(cudaStream_t s, ConstDevPtr x, DevPtr y, DevPtr th, int64_t n, float cap);
void softcap_backward(cudaStream_t s, ConstDevPtr th, ConstDevPtr dy, DevPtr dx, int64_t n);

// ---- loss (loss.cu) --------------------------------------------------------------------------
// Writes log_probs [n, v] and adds (sum of the rows' losses) / n to *loss_acc
// (device double), deterministic (fixed-order reduction). v is the row
// stride; the classes are the first `valid` columns (a padded vocabulary,
// plan/vocab_padding.h; -1: all v, else in [1, v], checked on the host): the
// softmax runs over them, the padded log-probabilities are -inf. A label
// outside [0, valid) sets *error_flag (when non-null) to 1 + its row.
void cross_entropy_forward(cudaStream_t s, ConstDevPtr logits, const int64_t* labels,
                           DevPtr log_probs, int64_t n, int64_t v, double* loss_acc,
                           int32_t* error_flag, Workspace ws, int64_t valid = -1);
size_t cross_entropy_forward_workspace_bytes(int64_t n, int64_t v);
// dlogits += dloss * (softmax - onehot) / n over the first `valid` columns;
// the padded columns of dlogits are left unchanged.
void cross_entropy_backward(cudaStream_t s, ConstDevPtr log_probs, const int64_t* labels,
                            float dloss, DevPtr dlogits, int64_t n, int64_t v, int64_t valid = -1);

// ---- mixture of experts (moe.cu): cpu::moe_* and sigmoid_gate_* twins -----------------
// indices and slots are device int64 arrays. No host synchronisation: the
// launches are sized by the plan (an expert's `rows`), the counts found on
// the device are checked against it through error flags.
//
// Router over n tokens: probs [n, E], indices [n, k], weights [n, k].
// forced_ends null: top-k routing (ties to the lower expert, as the CPU op).
// Non-null: forced routing, indices written from device int64 [E]
// cumulative per-sequence slot counts (exec::forced_routing_ends; seq tokens
// per sequence, n a multiple of seq). counts (device int64 [E], nullable): +=
// the (token, choice) pairs each expert got (integer atomics).
void moe_router_forward(cudaStream_t s, ConstDevPtr logits, DevPtr probs, int64_t* indices,
                        DevPtr weights, int64_t n, int64_t experts, int64_t k, bool normalize,
                        const int64_t* forced_ends, int64_t seq, int64_t* counts);
// dlogits += the gradient through the weights and the softmax (fp64 row sums).
void moe_router_backward(cudaStream_t s, ConstDevPtr probs, const int64_t* indices,
                         ConstDevPtr dweights, DevPtr dlogits, int64_t n, int64_t experts,
                         int64_t k, bool normalize);
// xe [rows, c], slots [rows] of one expert, filled in the CPU op's order;
// rows past the ones found are zeros with slot -1. A count against the plan
// (more than `rows`; or other than `rows` when `exact`, forced routing) sets
// *error_flag (nullable) to 1 + the count found.
void moe_dispatch_forward(cudaStream_t s, ConstDevPtr x, const int64_t* indices, DevPtr xe,
                          int64_t* slots, int64_t tokens, int64_t seq, int64_t c, int64_t k,
                          int64_t expert, int64_t rows, bool exact, int32_t* error_flag);
void moe_dispatch_backward(cudaStream_t s, ConstDevPtr dxe, const int64_t* slots, DevPtr dx,
                           int64_t rows, int64_t c, int64_t k, int64_t tokens);
// Host arrays of E device operands (y[e], slots[e]) and their row counts.
// out [tokens, c] = sum over experts, in expert order, of weight * row, in
// fp32; weighted (nullable host array of E) gets each row's product. A
// 16-bit out accumulates in the workspace (tokens * c fp32) and is rounded once.
void moe_combine_forward(cudaStream_t s, const ConstDevPtr* y, const int64_t* const* slots,
                         const int64_t* rows, int64_t experts, ConstDevPtr weights, DevPtr out,
                         int64_t tokens, int64_t c, int64_t k, const DevPtr* weighted,
                         Workspace ws);
size_t moe_combine_forward_workspace_bytes(plan::DType out, int64_t tokens, int64_t c);
// dy[e] += weight * dout rows; dweights += row dot products (fp64, fixed order).
void moe_combine_backward(cudaStream_t s, const ConstDevPtr* y, const int64_t* const* slots,
                          const int64_t* rows, int64_t experts, ConstDevPtr weights,
                          ConstDevPtr dout, const DevPtr* dy, DevPtr dweights, int64_t tokens,
                          int64_t c, int64_t k);
// y [n, c] = sigmoid(g[n]) * x, sig [n] kept; backward accumulates dg, dx.
void sigmoid_gate_forward(cudaStream_t s, ConstDevPtr g, ConstDevPtr x, DevPtr y, DevPtr sig,
                          int64_t n, int64_t c);
void sigmoid_gate_backward(cudaStream_t s, ConstDevPtr sig, ConstDevPtr x, ConstDevPtr dy,
                           DevPtr dg, DevPtr dx, int64_t n, int64_t c);

// ---- casts and copies (cast.cu) ------------------------------------------------------------
// dst[i] = src[i] rounded to dst's dtype (same dtype: cudaMemcpyAsync).
void cast(cudaStream_t s, ConstDevPtr src, DevPtr dst, int64_t n);
// dst[i] += src[i] (gradient accumulation), in fp32, rounded to dst's dtype.
void add_inplace(cudaStream_t s, ConstDevPtr src, DevPtr dst, int64_t n);
// x[i] *= factor (host value), or *= *factor_dev when factor_dev is non-null.
void scale_inplace(cudaStream_t s, DevPtr x, int64_t n, float factor, const float* factor_dev);

// ---- optimizer step and its numerics (optim.cu) ----------------------------------------------
// *acc += sum of x[i]^2 (device double; fixed-order two-pass reduction, deterministic).
void squared_norm_accumulate(cudaStream_t s, ConstDevPtr x, int64_t n, double* acc, Workspace ws);
size_t squared_norm_workspace_bytes(int64_t n);
// *flag = 1.0f when any x[i] is +-inf or NaN (never cleared here).
void inf_check(cudaStream_t s, ConstDevPtr x, int64_t n, float* flag);
// *factor = min(1, max_norm / (sqrt(*norm_sq) + 1e-6)) (torch.nn.utils.clip_grad_norm_).
void clip_factor(cudaStream_t s, const double* norm_sq, double max_norm, float* factor);
// Fused AdamW / SGD over a flat fp32 shard (cpu::adamw_step / sgd_step rules).
// g may be any float dtype; g_factor (device, nullable) multiplies g first
// (loss-scale unscaling and clipping); skip (device, nullable): when *skip !=
// 0 the kernel leaves p, m, v untouched (fp16 overflow: step skipped).
void adamw_step(cudaStream_t s, float* p, ConstDevPtr g, float* m, float* v, int64_t n,
                const AdamWParams& h, int64_t step, const float* g_factor, const float* skip);
void sgd_step(cudaStream_t s, float* p, ConstDevPtr g, float* buf, int64_t n, const SgdParams& h,
              int64_t step, const float* g_factor, const float* skip);

}  // namespace shardscope::engine::cuda
