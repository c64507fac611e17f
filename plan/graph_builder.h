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

#include <nlohmann/json.hpp>

#include "plan/graph.h"

namespace shardscope::plan {

// ---- configurations -----------------------------------------------------------

// Hugging Face GPT2Config (GPT2LMHeadModel).
struct Gpt2Config {
  int64_t n_layer = 12;
  int64_t n_embd = 768;
  int64_t n_head = 12;
  int64_t n_positions = 1024;
  int64_t vocab_size = 50257;
  int64_t n_inner = 0;  // 0: 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  std::string activation = "gelu_new";           // gelu_new | gelu_pytorch_tanh | gelu | relu
  bool scale_attn_weights = true;                // divide scores by sqrt(head_dim)
  bool scale_attn_by_inverse_layer_idx = false;  // further divide by (layer index + 1)
  bool tie_word_embeddings = true;               // lm_head uses transformer.wte.weight
};

// Hugging Face LlamaConfig / MistralConfig (LlamaForCausalLM, MistralForCausalLM).
struct LlamaConfig {
  // "llama" | "mistral" | "qwen2": picks the class names; qwen2 also fixes
  // the biases (q/k/v_proj with bias, o_proj and the MLP without).
  std::string model_type = "llama";
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads
  int64_t vocab_size = 32000;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  nlohmann::json rope_scaling = nullptr;  // recorded in the attention attrs
  int64_t sliding_window = 0;             // Mistral; 0 = none; recorded in attrs
  bool attention_bias = false;            // bias on q/k/v/o_proj (llama, mistral)
  bool mlp_bias = false;                  // bias on gate/up/down_proj
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";  // silu | gelu | gelu_pytorch_tanh | gelu_new
  // qwen3: RMSNorm over head_dim on every query and key head before RoPE
  // (self_attn.q_norm, self_attn.k_norm, weight [head_dim]).
  bool qk_norm = false;
};

// Hugging Face GemmaConfig / Gemma2Config (GemmaForCausalLM, Gemma2ForCausalLM),
// see plan/models_gemma.cpp.
struct GemmaConfig {
  std::string model_type = "gemma";  // "gemma" | "gemma2"
  int64_t hidden_size = 3072;
  int64_t intermediate_size = 24576;
  int64_t num_hidden_layers = 28;
  int64_t num_attention_heads = 16;
  int64_t num_key_value_heads = 16;
  int64_t head_dim = 256;  // explicit: H * head_dim need not be hidden_size
  int64_t vocab_size = 256000;
  int64_t max_position_embeddings = 8192;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  nlohmann::json rope_scaling = nullptr;         // recorded in the attention attrs
  std::string hidden_act = "gelu_pytorch_tanh";  // the MLP gate: gelu | gelu_pytorch_tanh
  bool attention_bias = false;                   // bias on q/k/v/o_proj
  bool tie_word_embeddings = true;
  // Gemma 2 only (0: off).
  double query_pre_attn_scalar = 0;  // attention scale query_pre_attn_scalar^-0.5 (0: head_dim)
  int64_t sliding_window = 0;        // window of the layers marked sliding
  std::vector<bool> sliding_layers;  // per layer (layer_types "sliding_attention")
  double final_logit_softcapping = 0;
  double attn_logit_softcapping = 0;
};

// Hugging Face Phi3Config (Phi3ForCausalLM), see plan/models_phi3.cpp.
struct Phi3Config {
  int64_t hidden_size = 3072;
  int64_t intermediate_size = 8192;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads
  int64_t vocab_size = 32064;
  int64_t max_position_embeddings = 4096;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  nlohmann::json rope_scaling = nullptr;  // recorded in the attention attrs
  int64_t sliding_window = 0;             // every layer; 0 = none
  std::string hidden_act = "silu";        // silu | gelu | gelu_pytorch_tanh
  bool tie_word_embeddings = false;
};

// Hugging Face MixtralConfig / Qwen2MoeConfig (MixtralForCausalLM,
// Qwen2MoeForCausalLM), see plan/models_moe.cpp.
struct MoeConfig {
  std::string model_type = "mixtral";  // "mixtral" | "qwen2_moe"
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 14336;  // Mixtral: each expert's; Qwen2-MoE: the dense layers'
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 8;
  int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads
  int64_t vocab_size = 32000;
  int64_t max_position_embeddings = 131072;
  double rms_norm_eps = 1e-5;
  double rope_theta = 1e6;
  nlohmann::json rope_scaling = nullptr;  // recorded in the attention attrs
  int64_t sliding_window = 0;             // Mixtral, every layer; 0 = none
  std::string hidden_act = "silu";        // silu | gelu | gelu_pytorch_tanh
  bool tie_word_embeddings = false;
  bool qkv_bias = false;              // Qwen2-MoE: bias on q/k/v_proj (default true)
  int64_t num_experts = 8;            // num_local_experts (Mixtral) / num_experts
  int64_t top_k = 2;                  // num_experts_per_tok
  int64_t moe_intermediate_size = 0;  // Qwen2-MoE: each routed expert's (Mixtral: intermediate)
  int64_t shared_expert_intermediate_size = 0;  // Qwen2-MoE's shared expert; 0 = none
  bool norm_topk_prob = true;                   // Mixtral always; Qwen2-MoE's key (default false)
  // Per layer: routed experts (true) or a dense MLP of intermediate_size
  // (Qwen2-MoE's decoder_sparse_step and mlp_only_layers). Empty: all routed.
  std::vector<bool> sparse_layers;
};

// The `mlp` preset: a residual MLP classifier small enough to train on CPU.
// input_proj Linear(in, hidden) -> n_blocks x MLPBlock(LayerNorm, fc1
// Linear(hidden, ffn), ReLU, fc2 Linear(ffn, hidden), + skip) -> head
// Linear(hidden, classes) -> cross_entropy. Inputs x [B, in] f32, labels [B] i64.
struct MlpConfig {
  int64_t in_features = 64;
  int64_t hidden = 256;
  int64_t ffn = 512;
  int64_t n_blocks = 4;
  int64_t classes = 10;
  double layer_norm_epsilon = 1e-5;
};

Graph build_gpt2(const Gpt2Config& config, const std::string& name);
Graph build_llama(const LlamaConfig& config, const std::string& name);
Graph build_mlp(const MlpConfig& config, const std::string& name);
Graph build_gemma(const GemmaConfig& config, const std::string& name);
Graph build_phi3(const Phi3Config& config, const std::string& name);
Graph build_moe(const MoeConfig& config, const std::string& name);
// The number of graph ops build_moe makes from `config` (sizes within
// hf_size_limit): what moe_config_from_hf checks against kMaxGraphOps.
int64_t moe_graph_ops(const MoeConfig& config);

// Hugging Face config.json contents -> config. `source` (the file) is named in
// errors: a missing or mistyped required key, a value out of range, or a
// feature that would change the math and is not modeled.
Gpt2Config gpt2_config_from_hf(const nlohmann::json& config, const std::string& source);
LlamaConfig llama_config_from_hf(const nlohmann::json& config, const std::string& source);
GemmaConfig gemma_config_from_hf(const nlohmann::json& config, const std::string& source);
Phi3Config phi3_config_from_hf(const nlohmann::json& config, const std::string& source);
MoeConfig moe_config_from_hf(const nlohmann::json& config, const std::string& source);

// Typed access to a config.json object; errors name the key and the file.
// Unknown extra keys are fine (HF configs carry many). get_int and
// require_int refuse a size key above its limit (plan/model_limits.h),
// naming the key, the value and the limit.
class HfConfigReader {
 public:
  HfConfigReader(const nlohmann::json& config, std::string source);

  bool has(const char* key) const;  // present and not null
  int64_t require_int(const char* key, int64_t min_value = 1) const;
  int64_t get_int(const char* key, int64_t fallback, int64_t min_value = 1) const;
  double get_double(const char* key, double fallback) const;  // must be > 0
  bool get_bool(const char* key, bool fallback) const;
  std::string get_string(const char* key, const std::string& fallback) const;
  const nlohmann::json* get(const char* key) const;  // nullptr when absent or null
  [[noreturn]] void fail(const char* key, const std::string& what) const;
  // Attention shape checks shared by the Llama-like readers: fail naming
  // num_key_value_heads unless it divides num_attention_heads; with no
  // head_dim (0: derived), fail naming num_attention_heads unless it divides
  // hidden_size.
  void check_kv_heads(int64_t heads, int64_t kv_heads) const;
  // With a head_dim (> 0) it also checks num_attention_heads x head_dim.
  void check_derived_head_dim(int64_t hidden, int64_t heads, int64_t head_dim) const;
  // Fails naming head_dim when num_attention_heads x head_dim exceeds
  // kMaxAttentionWidth (plan/model_limits.h).
  void check_attention_width(int64_t heads, int64_t head_dim) const;

 private:
  const nlohmann::json& config_;
  std::string source_;
};

// The gated MLP activation of a Hugging Face `hidden_act`: "silu", "gelu" or
// "gelu_tanh" (from gelu_pytorch_tanh). Anything else throws Error
// "<family> config for '<name>': unsupported hidden_act '<value>'".
std::string gated_activation(const std::string& hidden_act, const char* family,
                             const std::string& name);

// ---- shared builder ------------------------------------------------------------

// Dimension shorthands for tensor shapes.
Poly dim_b();
Poly dim_t();
Poly dim(int64_t n);
using Shape = std::vector<Poly>;

enum class WeightLayout { out_in, in_out };  // nn.Linear [out, in] | HF Conv1D [in, out]

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
  // here to this op's backward (see models.cpp). `offset`: the first row read
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
