// Model graph IR: a module tree whose leaves own ops, the parameters the ops
// use, and the activation tensors that flow between ops. This is what the
// planner wraps into FSDP units, what the simulator costs and what the engine
// executes. Sizes that depend on the workload are Polys in (B, T).
//
// Invariants (checked by Graph::validate):
//  - modules[0] is the root (parent -1, name ""); every other module's parent
//    index is smaller than its own (modules are stored in pre-order), and its
//    name is "<parent name>.<local>" (or "<local>" under the root);
//  - ops are stored in forward execution order; every op belongs to one module
//    and reads only tensors produced earlier (or graph inputs);
//  - every parameter is declared by exactly one module and used by >= 1 op;
//  - parameter names are unique; tensor names are unique; op names are unique;
//  - buffers (exported graphs) are tensors no op produces, not graph inputs,
//    with requires_grad false; an op of type aten carries attrs aten and kind.
// Ops of native graphs sit in leaf modules; an exported op may sit in any
// module (a decoder layer's residual add runs in the layer's own forward): it
// belongs to the innermost unit containing its module.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/expr.h"

namespace shardscope::plan {

// bool and u8: 1 byte (exported graphs: masks, torch.bool / torch.uint8 tensors).
enum class DType : uint8_t { f32, bf16, f16, f64, i64, i32, boolean, u8 };

int dtype_bytes(DType dtype);
const char* dtype_name(DType dtype);
// Throws plan::Error naming `field` on an unknown name.
DType parse_dtype(const std::string& name, const std::string& field);
bool is_floating(DType dtype);

struct Param {
  std::string name;            // Hugging Face style: "transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;  // dim 0 is the dim FSDP2 shards on
  DType dtype = DType::f32;    // storage dtype of the full-precision parameter
  int module = -1;             // index of the module that declares it
  int64_t numel() const;
};

// An activation value. Floating tensors are listed as f32; at run time they take
// the compute dtype (the policy's mixed_precision.param_dtype). Token ids are i64.
// The bytes per element of a floating tensor or op temporary, given the
// compute dtype. The model code users run upcasts some values to fp32
// whatever the compute dtype (Hugging Face's RMSNorm and loss), and PyTorch
// keeps normalisation statistics in fp32.
enum class Precision : uint8_t {
  compute,       // the compute dtype (policy mixed_precision.param_dtype)
  fp32,          // always fp32: statistics, log-probabilities
  upcast_extra,  // 4 - compute bytes (0 in fp32): the difference between an
                 // fp32 copy autograd saves and the compute-dtype tensor the
                 // graph keeps in its place
  fp32_if_lowp,  // fp32 below fp32, nothing in fp32: an upcast copy that
                 // `.float()` skips when the value already is fp32
};
const char* precision_name(Precision p);
// Throws plan::Error naming `field` on an unknown name.
Precision parse_precision(const std::string& name, const std::string& field);
int precision_bytes(Precision p, int compute_bytes);
constexpr int kPrecisionCount = 4;

struct Tensor {
  std::string name;
  std::vector<Poly> shape;  // each dim a polynomial in (B, T), usually a monomial
  DType dtype = DType::f32;
  Precision precision = Precision::compute;  // floating tensors only
  // false: autograd gives it no gradient although it is floating and produced
  // by an op (exported graphs: causal masks, rotary cos/sin, buffers). Graph
  // JSON holds the key only when false; true is today's rule (needs_grad).
  bool requires_grad = true;
  Poly numel() const;  // product of the dims
  // numel().eval(w) without building the product; throws std::overflow_error.
  int64_t numel_at(const Workload& w) const;
};

// What an op computes. Graph JSON and trace events name it by op_type_name.
enum class OpType : uint8_t {
  embedding,      // token (ids input) or position (no input) embedding lookup
  linear,         // x W^T (+ b), or x W for the Conv1D layout
  layernorm,      // LayerNorm over the last dim, with weight and bias
  rmsnorm,        // RMSNorm over the last dim, with weight
  attention,      // causal scaled-dot-product attention (RoPE inside it for Llama)
  gelu,           // elementwise GELU
  swiglu,         // silu(gate) * up
  residual,       // a + b (b may broadcast)
  cross_entropy,  // mean cross entropy of logits against labels -> scalar loss
  rope,           // standalone RoPE: accepted in a graph, built by no model, run by no engine
  relu,           // elementwise ReLU
  scale,          // y = x * scale (a constant rounded to the activation dtype): Gemma's
                  // embedding normalizer sqrt(hidden_size)
  softcap,        // y = softcap * tanh(x / softcap): Gemma 2's final logit soft-capping
  // Mixture of experts (Mixtral, Qwen2-MoE; plan/models_moe.cpp):
  moe_router,    // router logits [B, T, E] -> softmax (fp32) -> top-k weights [B, T, k] and
                 // expert indices [B, T, k] (i64), renormalised when norm_topk_prob
  moe_dispatch,  // x [B, T, C] and the indices -> expert e's rows [B*routed(e,E,k), C] and
                 // their slots [B*routed(e,E,k)] (i64: token * k + choice)
  moe_combine,   // sum over experts of weight * expert output, scattered back to [B, T, C]
  sigmoid_gate,  // y = sigmoid(g) * x, g [.., 1] broadcast over x's last dim (Qwen2-MoE's
                 // shared_expert_gate)
  aten,          // one aten op of an exported graph (python/ exporter, docs/models.md
                 // "Exported graphs"): attrs aten (the overload, "aten.mm.default") and kind
};

// Cost class of an aten op (attr kind): gemm is costed like linear (and takes
// the BLAS workspace), attention by FLOPs at the attention efficiency, memory
// by bytes at HBM bandwidth (the max(flops, bytes) roofline of every op).
enum class AtenKind : uint8_t { gemm, attention, memory };
const char* aten_kind_name(AtenKind kind);
// Throws plan::Error naming `field`: "unknown kind 'foo' (one of gemm, attention, memory)".
AtenKind parse_aten_kind(const std::string& name, const std::string& field);

const char* op_type_name(OpType type);
// Throws plan::Error naming `field` on an unknown name.
OpType parse_op_type(const std::string& name, const std::string& field);

// Op-specific attributes. Every one is optional: a graph lists exactly those
// that are set (graph JSON "attrs" holds the set ones, under these names), and
// each reader states the default it assumes for an absent one. The comment
// over each group names the op types that may carry it (the graph JSON reader
// rejects an attribute on any other type).
struct OpAttrs {
  // embedding
  std::optional<int64_t> num_embeddings;   // rows of the table
  std::optional<int64_t> embedding_dim;    // columns of the table
  std::optional<bool> positions;           // ids are arange(T): no input tensor (set only if true)
  std::optional<int64_t> position_offset;  // positions: rows offset + arange(T) (OPT: 2; absent: 0)
  std::optional<int64_t> padding_idx;      // token ids equal to it add no gradient (nn.Embedding)
  // linear
  std::optional<int64_t> in_features;
  std::optional<int64_t> out_features;
  std::optional<bool> bias;                  // reads a bias parameter (absent: false)
  std::optional<std::string> weight_layout;  // "out_in" (nn.Linear; absent) | "in_out" (Conv1D)
  std::optional<bool> tied;                  // weight is another module's (set only if true)
  // layernorm, rmsnorm
  std::optional<double> eps;   // added to the variance (absent: 1e-5)
  std::optional<int64_t> dim;  // normalized dim: the last dim, or (rmsnorm) a divisor of it,
                               // normalizing each group of `dim` (Qwen3's per-head q/k norm)
  // rmsnorm
  std::optional<double> weight_offset;  // y = x * rstd * (weight_offset + w) (Gemma: 1; absent: 0)
  // attention
  std::optional<int64_t> n_head;
  std::optional<int64_t> n_kv_head;  // < n_head: grouped-query attention
  std::optional<int64_t> head_dim;
  std::optional<double> scale;              // on q.k (absent: 1/sqrt(head_dim))
  std::optional<bool> rope;                 // rotate q and k (absent: false)
  std::optional<double> rope_theta;         // RoPE base (absent: 10000)
  std::optional<std::string> rope_scaling;  // Hugging Face rope_scaling, as compact JSON text
  std::optional<int64_t> sliding_window;    // window W in tokens: query t sees keys t-W < j <= t
  std::optional<double> softcap;            // attention: scores = softcap * tanh(scores / softcap)
                                            // (Gemma 2); softcap op: the cap
  std::optional<bool> causal;
  std::optional<bool> qkv_packed;  // one [.., (H+2*Hkv)*D] input (q | k | v) instead of three
  // packed input laid out per head [.., H, 3, D] (GPT-NeoX's query_key_value)
  // rather than [.., 3, H, D] (set only if true; only with qkv_packed)
  std::optional<bool> qkv_per_head;
  std::optional<int64_t> rotary_dim;  // with rope: leading elements of a head that
                                      // rotate (GPT-NeoX rotary_pct; absent: head_dim)
  // RoPE ends in torch.cat (transformers' partial-rotary form, Phi-3): q at
  // SDPA is a contiguous [B, H, T, D] tensor, so SDPA's output is laid out
  // [B, H, T, D] and o_proj's input is a contiguous copy of it (set only if true)
  std::optional<bool> rope_cat;
  // The model's attention class copies k and v to n_head heads (repeat_kv)
  // before SDPA whatever the mask (transformers 4.57 Qwen2MoeSdpaAttention);
  // without it they are repeated only under an explicit mask (plan/sdpa.h).
  // Set only if true.
  std::optional<bool> repeat_kv;
  // gelu
  std::optional<std::string> approximate;  // "none" (erf) | "tanh" (absent)
  // swiglu
  std::optional<std::string> activation;  // "silu", "gelu", "gelu_tanh" (gated MLP)
  std::optional<bool> packed;  // one input [.., 2F]: gate then up (Phi-3); set only if true
  // residual
  std::optional<bool> broadcast;  // b has fewer dims than a (set only if true)
  // cross_entropy
  std::optional<int64_t> classes;  // size of the logits' last dim
  // The first valid_classes columns are the real vocabulary V; the rest, up
  // to classes (Vp), are padding (policy vocab_pad_to, plan/vocab_padding.h):
  // no label names them and the softmax excludes them. Absent: classes.
  std::optional<int64_t> valid_classes;
  std::optional<std::string> reduction;  // "mean"
  // moe_router, moe_dispatch, moe_combine
  std::optional<int64_t> num_experts;  // E
  std::optional<int64_t> top_k;        // k: experts per token
  std::optional<int64_t> expert;       // moe_dispatch: which expert's rows it gathers
  std::optional<bool> norm_topk_prob;  // moe_router: weights / their sum (absent: false)
  // aten (both required on type aten, on no other type)
  std::optional<std::string> aten;  // the overload that ran in forward: "aten.mm.default"
  std::optional<std::string> kind;  // "gemm" | "attention" | "memory" (AtenKind)

  bool operator==(const OpAttrs& other) const;
  bool operator!=(const OpAttrs& other) const { return !(*this == other); }
};

struct Temp {
  Poly numel;
  Precision precision = Precision::compute;
};

struct Op {
  std::string name;  // unique; usually the module path plus a suffix
  OpType type = OpType::linear;
  int module = -1;            // module the op runs in (a leaf, except in exported graphs)
  std::vector<int> inputs;    // tensor indices
  std::vector<int> outputs;   // tensor indices (produced here)
  std::vector<int> params;    // parameter indices read by the op (tied ones too)
  std::vector<int> saved;     // tensors kept from forward for backward
  Poly fwd_flops, bwd_flops;  // floating point operations (multiply-add = 2)
  Poly fwd_bytes, bwd_bytes;  // bytes read + written in fp32 (scaled by dtype at cost time)
  Poly workspace_bytes;       // transient scratch during the op, fp32 bytes
  // Temporaries live only while the op's forward (also a recompute) or
  // backward runs: what autograd allocates and drops inside the module (the
  // loss's fp32 copy of the logits, log_softmax's gradients). Elements.
  std::vector<Temp> fwd_temps, bwd_temps;
  OpAttrs attrs;  // op-specific: eps, n_head, n_kv_head, ...
};

// A matrix multiply on cuBLAS: a linear op, or an aten op of kind gemm
// (costed like linear, takes the BLAS workspace).
bool is_gemm(const Op& op);

// An aten op whose backward returns views of its output's gradient, one per
// input (aten.cat / aten.stack: narrow / select of grad_output). autograd then
// keeps that whole gradient's storage while any input's view of it is pending:
// a UNet's skip, read by an up-path cat and by the down path, holds the whole
// concatenated gradient until the down path's backward reaches it.
bool backward_returns_views_of_output_grad(const Op& op);

struct Module {
  std::string name;        // dotted path; "" for the root
  std::string class_name;  // Hugging Face class name: GPT2Block, LlamaDecoderLayer, ...
  int parent = -1;
  std::vector<int> children;  // module indices, in forward order
  bool is_container = false;  // nn.ModuleList / ModuleDict: never wrapped by the size policy
};

struct Graph {
  static constexpr int kSchemaVersion = 1;

  std::string model_name;  // "gpt2-small", or the config file it came from
  // "gpt2" | "llama" | "qwen2" | "qwen3" | "gemma" | "gemma2" | "phi3" | "gpt_neox" | "opt" |
  // "mixtral" | "qwen2_moe" | "mlp" | "exported" (python/ exporter: no builder)
  std::string family;
  int64_t max_seq_len = 1;      // longest sequence the model accepts
  int64_t vocab_size = 0;       // 0 for models without token input
  std::vector<Module> modules;  // modules[0] is the root; pre-order
  std::vector<Param> params;
  std::vector<Tensor> tensors;
  std::vector<Op> ops;      // forward execution order
  std::vector<int> inputs;  // tensors fed from the data (input ids, labels)
  int loss = -1;            // scalar tensor whose backward starts the backward pass
  // Exported graphs only (empty in native ones, and then absent from graph JSON):
  // module classes FSDP units wrap when the policy names none (HF _no_split_modules);
  std::vector<std::string> default_wrap_classes;
  // tensors held for the whole step like unsharded parameters (non-persistent
  // module buffers: rotary inv_freq): no producer, requires_grad false,
  // resident on every rank;
  std::vector<int> buffers;
  // the exporter's provenance (torch version, traced sizes, source) as compact
  // JSON object text, kept and written back unchanged ("" when absent).
  std::string exporter;

  bool is_exported() const { return family == "exported"; }
  int64_t params_total() const;
  int find_module(const std::string& name) const;  // -1 if absent
  int find_param(const std::string& name) const;   // -1 if absent
  // Throws plan::Error describing the first broken invariant (see the file comment).
  void validate() const;
};

}  // namespace shardscope::plan
