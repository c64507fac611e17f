// Builders of the model graphs (GPT-2, Llama/Mistral, a small MLP) and the
// shared GraphBuilder that emits ops with their costs. Module and parameter
// names and class names are those of Hugging Face transformers, so that
// class-based wrapping (`wrap.classes=["GPT2Block"]`) and checkpoints line up.
//
// Graph conventions shared by every builder:
//  - Only modules that own parameters or ops (or have such descendants) are
//    listed: dropout modules, LlamaRotaryEmbedding and the like are left out.
//    Dropout is not modeled (the engine trains without it, as llm.c does).
//  - Activation tensors are f32 (they take the compute dtype at run time);
//    token ids and labels are i64. Linear layouts keep heads merged: q is
//    [B, T, n_head*head_dim].
//  - An op's outputs[0] is its value; further outputs are statistics kept for
//    backward (layernorm mean/rstd, rmsnorm rstd, attention log-sum-exp,
//    cross-entropy log-probabilities), in fp32 as PyTorch keeps them, then
//    the other tensors autograd saves inside the module as Hugging Face
//    writes it (transformers 4.57, SDPA attention), which only take memory:
//    RMSNorm's normalised value and the fp32 copy of its input (an
//    upcast_extra on top of the input), the gated MLP's act(gate), an
//    unfused GELU's intermediates; and GPT-2's causal-mask module buffers
//    (n_positions^2 bools per block, GraphBuilder::position_embedding);
//    with RoPE on a packed projection (GPT-NeoX), the roped copies of q and
//    k, which SDPA saves while v, a view, keeps the packed output alive, and
//    (qkv_per_head) SDPA's own [B, H, T, D] output, of which dense saves a
//    contiguous copy.
//    They have no gradient and the engines do not write them.
//  - The loss is Hugging Face's ForCausalLMLoss: logits.float() (a forward
//    temporary below fp32), log_softmax saved in fp32, and in backward the
//    fp32 gradients of log_softmax's output and input (the latter an
//    upcast_extra on top of the logits' gradient).
//  - Costs, with N = rows (B*T for language models, B for the MLP), all in
//    FLOPs (a multiply-add is 2) and bytes:
//      linear         fwd 2*N*in*out (+ N*out with bias); bwd 4*N*in*out (dX and
//                     dW, each one forward matmul) (+ N*out for the bias grad)
//      attention      fwd 4*B*T^2*H*D (QK^T and PV over the full T x T square:
//                     causal masking is not halved, as torch.utils.flop_counter
//                     counts SDPA); bwd 10*B*T^2*H*D (recompute QK^T, then dV,
//                     dP, dQ, dK: flash-style, no T x T matrix is saved);
//                     with RoPE + 3*B*T*(H+Hkv)*R each way; with softcap
//                     (Gemma 2) + 3*B*T^2*H each way (divide, tanh, multiply;
//                     backward 1 - t^2 and the product). H = query heads,
//                     Hkv = key/value heads, D = head_dim, R = rotary_dim (the
//                     rotated part of a head: D unless partial, GPT-NeoX's
//                     rotary_pct * D); softmax not counted; a sliding window
//                     does not reduce the count.
//      layernorm      fwd 8*N*C, bwd 16*N*C;   rmsnorm fwd 4*N*C, bwd 8*N*C (Gemma's
//                     1 + weight and Qwen3's per-head groups alike)
//      gelu (tanh)    fwd 8 per element, bwd 16;  relu fwd 1, bwd 1
//      swiglu         fwd 5 per output element (sigmoid 3, two products), bwd 10;
//                     the same with a GELU gate and with Phi-3's packed input
//      scale          fwd 1 per element, bwd 1 (Gemma's x * sqrt(hidden_size))
//      softcap        fwd 3 per element (divide, tanh, multiply), bwd 4 (multiply,
//                     1 - t^2, product, divide); saves tanh's output
//      residual       fwd 1 per element, bwd 1 (the add where autograd sums the
//                     skip and branch gradients)
//      embedding      fwd 0 (a gather), bwd N*C (scatter-add into the table)
//      cross_entropy  fwd 5*N*V (max, subtract, exp, sum, log), bwd 3*N*V
//    Mixture of experts (plan/graph_builder_moe.cpp), with E experts, top-k,
//    R_e = B*routed(e,E,k) rows of expert e (plan/expr.h):
//      moe_router     fwd 5*N*E (softmax) + 2*N*k with norm_topk_prob (sum,
//                     divide); bwd 4*N*E (softmax backward) + 4*N*k with it;
//                     top-k selection is comparisons, not counted
//      moe_dispatch   fwd 0 (a gather), bwd R_e*C (scatter-add into dx)
//      moe_combine    fwd 2*C per routed row (weight product, add), bwd 3*C per
//                     row (the row's gradient, and its weight's as a dot product)
//      sigmoid_gate   fwd N*C + 4*N (sigmoid of the [N, 1] gate, product), bwd
//                     3*N*C + 3*N
//    Bytes (fp32 = 4 per floating element, i64 = 8): fwd reads every input and
//    parameter and writes every output; bwd reads the gradient of outputs[0],
//    the saved tensors and the parameters, and writes the gradients of the
//    floating inputs and of the parameters. An embedding touches only the
//    gathered rows (N*C) of its table, each way. Workspace is 0 for every op:
//    flash attention keeps its T x T tiles on chip.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/graph.h"

namespace shardscope::plan {

// Dimension shorthands for tensor shapes.
Poly dim_b();
Poly dim_t();
Poly dim(int64_t n);
using Shape = std::vector<Poly>;

enum class WeightLayout { out_in, in_out };  // nn.Linear [out, in] | HF Conv1D [in, out]

// Sets op.fwd_bytes and op.bwd_bytes from its tensors and parameters in `g`
// (the byte rule of the file comment); `param_traffic` overrides the parameter
// elements read/written (an embedding's gathered rows). GraphBuilder's layers
// and graph rewrites (plan/vocab_padding.h) share it.
void set_op_byte_costs(const Graph& g, Op& op, const Poly* param_traffic = nullptr);

// Emits modules, parameters, tensors and ops in forward order. Layer methods
// add one op in `module` (named after the module, or "<module>.<suffix>"),
// declare the parameters they own on that module, and return the index of the
// op's output tensor.
class GraphBuilder {
 public:
  GraphBuilder(std::string model_name, std::string family, int64_t max_seq_len, int64_t vocab_size);

  int add_module(int parent, const std::string& local_name, const std::string& class_name,
                 bool is_container = false);
  int add_param(int module, const std::string& local_name, std::vector<int64_t> shape);
  int add_tensor(const std::string& name, Shape shape, DType dtype = DType::f32,
                 Precision precision = Precision::compute);
  int add_input(const std::string& name, Shape shape, DType dtype);
  const Graph& graph() const { return g_; }
  const std::string& module_name(int module) const { return g_.modules[module].name; }

  // Token embedding of `ids` [..] -> [.., dim]; declares "weight" [rows, dim].
  // padding_idx >= 0: that row gets no gradient (attr padding_idx).
  int embedding(int module, int ids, int64_t rows, int64_t dim, int64_t padding_idx = -1);
  // Position embedding (ids are offset + arange(T), no input tensor) -> [T, dim].
  // `module_buffer_bytes`: the model's non-parameter buffers, counted from
  // here to this op's backward (see graph_builder.cpp). `offset`: the first row read
  // (OPTLearnedPositionalEmbedding: 2).
  int position_embedding(int module, int64_t rows, int64_t dim, int64_t module_buffer_bytes = 0,
                         int64_t offset = 0);
  // x [.., in] -> [.., out]. Declares "weight" (and "bias") unless tied_weight >= 0,
  // in which case the op reads that existing [out, in] parameter and has no bias.
  int linear(int module, int x, int64_t in, int64_t out, bool bias, WeightLayout layout,
             int tied_weight = -1);
  int layernorm(int module, int x, int64_t dim, double eps);
  // RMSNorm over groups of `dim` elements of x's last dim (groups * dim):
  // groups > 1 normalizes each head (Qwen3's q_norm/k_norm over head_dim).
  // weight_offset 1 is Gemma's x * rstd * (1 + w), computed in fp32 (the
  // normalised value is saved in fp32); 0 is Llama's.
  int rmsnorm(int module, int x, int64_t dim, double eps, double weight_offset = 0.0,
              int64_t groups = 1);
  // `qkv`: one packed [.., (H+2*Hkv)*D] tensor (GPT-2, GPT-NeoX, Phi-3) or three
  // tensors q, k, v. `attrs` carries the model's scale, rope, rope_theta,
  // rope_scaling, sliding_window, softcap, rotary_dim, qkv_per_head; n_head,
  // n_kv_head, head_dim, causal and qkv_packed are set here. Packed with rope:
  // outputs gain the roped q and k copies SDPA saves.
  int attention(int module, const std::vector<int>& qkv, int64_t n_head, int64_t n_kv_head,
                int64_t head_dim, OpAttrs attrs);
  // `unfused_saved`: further tensors of x's size autograd keeps when the
  // activation is a Python expression rather than F.gelu (gelu_new: 3).
  // `unfused_bwd_temps`: tensors of x's size its backward holds at once
  // besides its operands (gelu_new: 1).
  int gelu(int module, int x, const std::string& approximate, int unfused_saved = 0,
           int unfused_bwd_temps = 0);
  int relu(int module, int x);
  // act(gate) * up; `activation` is "silu" (SwiGLU), "gelu" or "gelu_tanh".
  int swiglu(int module, int gate, int up, const std::string& activation = "silu",
             int unfused_saved = 0, int unfused_bwd_temps = 0);
  // act(gate) * up of one packed [.., 2F] input (gate then up, torch.chunk(2)):
  // Phi-3's gate_up_proj; "silu" only as the others' activation argument.
  int swiglu_packed(int module, int gate_up, int64_t f, const std::string& activation = "silu");
  int residual(int module, const std::string& suffix, int a, int b);
  // x * scale (scale rounded to the activation dtype): Gemma's embedding normalizer.
  int scale(int module, const std::string& suffix, int x, double scale);
  // softcap * tanh(x / softcap): Gemma 2's final logit soft-capping.
  int softcap(int module, const std::string& suffix, int x, double softcap);
  // Mean cross entropy of logits [.., classes] against labels [..] -> scalar loss.
  int cross_entropy(int module, int logits, int labels, int64_t classes);

  // Mixture of experts (plan/graph_builder_moe.cpp). Router logits [B, T, E]
  // -> the top-k weights [B, T, k] (compute dtype) and expert indices
  // [B, T, k] (i64), from a softmax in fp32 (renormalised over the k when
  // `norm_topk_prob`).
  struct MoeRoute {
    int weights = -1, indices = -1;
  };
  MoeRoute moe_router(int module, int logits, int64_t experts, int64_t top_k, bool norm_topk_prob);
  // Expert `expert`'s rows of x [B, T, C]: [B*routed(e,E,k), C], and their
  // slots [B*routed(e,E,k)] (i64: token * k + choice).
  struct MoeRows {
    int x = -1, slots = -1;
  };
  MoeRows moe_dispatch(int module, int x, int indices, int64_t expert, int64_t experts,
                       int64_t top_k);
  // sum_e weight(slot) * expert_out[e][row], scattered back to the tokens: [B, T, C].
  int moe_combine(int module, const std::vector<int>& expert_out, const std::vector<int>& slots,
                  int weights, int64_t experts, int64_t top_k);
  // sigmoid(gate) * x, gate [.., 1]: Qwen2-MoE's shared_expert_gate.
  int sigmoid_gate(int module, const std::string& suffix, int gate, int x);

  // Sets the loss, validates and returns the graph.
  Graph finish(int loss);

 private:
  // Adds the op with byte costs derived from its tensors (see the file
  // comment); `param_traffic` overrides the parameter elements read/written.
  Op& add_op(Op op, const Poly* param_traffic = nullptr);
  std::string op_name(int module, const std::string& suffix) const;
  const Shape& shape(int tensor) const { return g_.tensors[tensor].shape; }
  Poly rows(int tensor) const;  // product of all dims but the last

  Graph g_;
};

}  // namespace shardscope::plan
