// CPU ops with forward and backward for every op type of plan/'s model graphs
// (plan/graph_builder.h): fp32 math on contiguous row-major float arrays.
//
// Conventions (every function below):
//  - Shapes are given by the arguments; N = rows (product of every dim but the
//    last), C = the last dim. Pointers are never aliased unless a comment says so.
//  - Forward functions *overwrite* their outputs.
//  - Backward functions *accumulate* (+=) into every gradient they produce
//    (inputs and parameters alike): a tensor read by two ops, or a tied
//    parameter, receives the sum of its users' contributions. Callers zero a
//    gradient buffer before its first producer runs.
//  - Deterministic: no result depends on thread count or timing (fixed-order
//    reductions; OpenBLAS runs single-threaded per calling thread, see
//    set_blas_threads).
//  - Errors: a negative size, a null pointer that must be read or written, or
//    an inconsistent shape throws std::invalid_argument naming the function and
//    the argument; an id or label read from data outside its range throws
//    std::out_of_range with the value and its index.
#pragma once

#include <cstdint>

namespace shardscope::engine::cpu {

// OpenBLAS threads used by linear(); the engine calls set_blas_threads(1) so
// that each stream thread runs one BLAS thread (2 cores are not oversubscribed).
void set_blas_threads(int threads);

enum class WeightLayout : uint8_t { out_in, in_out };  // nn.Linear [out, in] | HF Conv1D [in, out]

// ---- embedding ----------------------------------------------------------------
// out[i, :] = table[ids[i], :]; ids in [0, rows) (checked: throws std::out_of_range
// naming the id). ids == nullptr: positions, out[i, :] = table[i, :] for i < n
// (n > rows throws std::out_of_range).
void embedding_forward(const int64_t* ids, const float* table, float* out, int64_t n, int64_t rows,
                       int64_t dim);
// dtable[ids[i], :] += dout[i, :], in order of i (fixed order). padding_idx >= 0:
// rows i with ids[i] == padding_idx add nothing (nn.Embedding's padding_idx: that
// row gets no gradient); -1: none.
void embedding_backward(const int64_t* ids, const float* dout, float* dtable, int64_t n,
                        int64_t rows, int64_t dim, int64_t padding_idx = -1);

// ---- linear -------------------------------------------------------------------
// y[N, out] = x[N, in] @ W^T + b (out_in: W [out, in]; in_out: W [in, out], y = x @ W).
// bias may be nullptr. cblas_sgemm; N, in and out must fit in int (BLAS dims).
void linear_forward(const float* x, const float* w, const float* bias, float* y, int64_t n,
                    int64_t in, int64_t out, WeightLayout layout);
// dx += dy @ W (as laid out), dw += dy^T x (or x^T dy for in_out), dbias += sum_rows dy.
// dx may be nullptr (input needs no gradient); dbias nullptr when there is no bias.
void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* dbias, int64_t n, int64_t in, int64_t out, WeightLayout layout);

// ---- normalisation --------------------------------------------------------------
// y = (x - mean) * rstd * w + b per row; mean[N], rstd[N] = 1/sqrt(var + eps) (biased var).
// Backward reads the saved mean/rstd; dx, dw, db are all required.
void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                       float* rstd, int64_t n, int64_t c, double eps);
void layernorm_backward(const float* x, const float* w, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dw, float* db, int64_t n, int64_t c);
// y = x * rstd * (weight_offset + w), rstd = 1/sqrt(mean(x^2) + eps) (Gemma:
// weight_offset 1). A row of c elements may be one head of a wider tensor
// (Qwen3's q_norm: n = B*T*H rows of c = head_dim).
void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t n, int64_t c,
                     double eps, double weight_offset = 0.0);
void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                      float* dw, int64_t n, int64_t c, double weight_offset = 0.0);

// ---- attention --------------------------------------------------------------------
// Causal scaled-dot-product attention with grouped-query heads and optional
// rotary embeddings (Hugging Face Llama's rotate_half convention: element i of a
// head pairs with i + D/2, inv_freq[i] = theta^(-2i/D), position = t). Partial
// rotary (GPT-NeoX's rotary_pct): only the first R = rotary_dim elements of each
// head rotate, element i < R/2 pairing with i + R/2, inv_freq[i] = theta^(-2i/R);
// elements R.. pass through unchanged.
struct AttentionShape {
  int64_t batch = 1, seq = 1;  // B, T
  int64_t n_head = 1;          // H query heads
  int64_t n_kv_head = 1;       // Hkv, H % Hkv == 0: query head h uses kv head h / (H / Hkv)
  int64_t head_dim = 1;        // D (even when rope)
  double scale = 1.0;          // scores = scale * q.k
  bool rope = false;           // head_dim odd with rope: std::invalid_argument
  double rope_theta = 10000.0;
  double softcap = 0.0;        // > 0: scores = softcap * tanh(scores / softcap) (Gemma 2)
  int64_t sliding_window = 0;  // > 0: query t sees keys j with t - window < j <= t
  int64_t rotary_dim = 0;      // R, the leading elements of a head that rotate; 0: head_dim.
                               // With rope: even and <= head_dim (else std::invalid_argument)
};
// q [B, T, H*D], k and v [B, T, Hkv*D] given as base pointers with row strides
// (elements between consecutive (b, t) rows): packed GPT-2 c_attn output
// [B, T, 3*H*D] is q = base, k = base + H*D, v = base + 2*H*D, all stride 3*H*D;
// separate tensors have stride H*D (q) and Hkv*D (k, v).
// head_stride: elements between consecutive heads of q, k and v within a row
// (0: head_dim). GPT-NeoX's packed query_key_value output is laid out per head
// [B, T, H, 3, D]: q = base, k = base + D, v = base + 2*D, head_stride 3*D,
// row strides 3*H*D.
// out [B, T, H*D]; lse [B, H, T] = log-sum-exp of each query's scaled scores.
struct QkvView {
  const float* q;
  const float* k;
  const float* v;
  int64_t q_stride, kv_stride;
  int64_t head_stride = 0;
};
void attention_forward(const AttentionShape& s, const QkvView& qkv, float* out, float* lse);
// Gradients of q, k, v (accumulated), with their own row strides and the
// inputs' head_stride: dq/dk/dv point at the gradient buffer(s) (packed: one
// [B, T, 3*H*D] buffer at offsets 0, H*D, 2*H*D, or 0, D, 2*D per head),
// which may be laid out otherwise than the inputs read (a separate [B, T,
// H*D] q, k and v copied to H heads, of which the first Hkv*D of a row are
// read, against a packed gradient: plan/sdpa.h kv_copied). The probabilities are
// recomputed from q, k and lse; out is the forward output (for the row term
// dout . out of the softmax backward). Scratch is O(T*D) per call.
struct QkvGrad {
  float* dq;
  float* dk;
  float* dv;
  int64_t q_stride, kv_stride;
  int64_t head_stride = 0;  // must equal the inputs'
};
void attention_backward(const AttentionShape& s, const QkvView& qkv, const float* out,
                        const float* lse, const float* dout, const QkvGrad& grad);

// ---- pointwise ----------------------------------------------------------------------
// tanh_approximation true: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (gelu_new,
// gelu_pytorch_tanh, gelu_fast); false: exact 0.5 x (1 + erf(x / sqrt 2)).
void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approximation);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approximation);
void relu_forward(const float* x, float* y, int64_t n);
void relu_backward(const float* y, const float* dy, float* dx, int64_t n);  // uses the output
// y = silu(gate) * up
void swiglu_forward(const float* gate, const float* up, float* y, int64_t n);
void swiglu_backward(const float* gate, const float* up, const float* dy, float* dgate, float* dup,
                     int64_t n);
// y[n] = a[n] + b[n % b_n] (b_n == n: plain add; b_n < n: b broadcast over leading dims,
// GPT-2's wte + wpe; b_n must divide n). Backward: da += dy; db[j] += sum over rows
// of dy (double, row order); da or db may be nullptr when that input needs no gradient.
// Gated MLP y = act(gate) * up over rows x width, gate and up read with a row
// stride (elements between rows' starts; >= width): Phi-3's packed
// gate_up [N, 2F] is gate = base, up = base + F, stride 2F; separate tensors
// are one row of n with any stride. dgate/dup use the same stride as
// gate/up; y and dy are dense [rows, width]. silu is swiglu_forward's math;
// gelu and gelu_tanh are gelu_forward's.
enum class GateActivation : uint8_t { silu, gelu, gelu_tanh };
void gated_forward(const float* gate, const float* up, float* y, int64_t rows, int64_t width,
                   int64_t stride, GateActivation act);
void gated_backward(const float* gate, const float* up, const float* dy, float* dgate, float* dup,
                    int64_t rows, int64_t width, int64_t stride, GateActivation act);
// y = x * scale; dx += dy * scale.
void scale_forward(const float* x, float* y, int64_t n, float scale);
void scale_backward(const float* dy, float* dx, int64_t n, float scale);
// th = tanh(x / cap), y = cap * th (th kept for backward); dx += dy * (1 - th^2). cap > 0.
void softcap_forward(const float* x, float* y, float* th, int64_t n, float cap);
void softcap_backward(const float* th, const float* dy, float* dx, int64_t n);
void residual_forward(const float* a, const float* b, float* y, int64_t n, int64_t b_n);
void residual_backward(const float* dy, float* da, float* db, int64_t n, int64_t b_n);

// ---- loss ------------------------------------------------------------------------------
// Mean cross entropy of logits [N, V] against labels [N] (N >= 1: the mean of
// no rows is an error, not NaN). V is the row stride; the classes are the
// first `valid` columns (a padded vocabulary, plan/vocab_padding.h; -1: all V;
// else in [1, V], checked), each label in [0, valid) (checked), and the
// softmax runs over them only: the loss is the unpadded rows' to the bit.
// Writes log_probs [N, V] (kept for backward; -inf in the padded columns) and
// returns the loss (double sum of the rows' losses, in row order, divided by N).
double cross_entropy_forward(const float* logits, const int64_t* labels, float* log_probs,
                             int64_t n, int64_t v, int64_t valid = -1);
// dlogits += dloss * (softmax - onehot) / N over the first `valid` columns;
// the padded ones are left unchanged (no gradient).
void cross_entropy_backward(const float* log_probs, const int64_t* labels, float dloss,
                            float* dlogits, int64_t n, int64_t v, int64_t valid = -1);

// ---- mixture of experts (ops_moe.cpp) ---------------------------------------------------
// Router over n tokens and E experts: probs[n, E] = softmax(logits) (in
// double, stored fp32); with choose_topk, indices[n, k] = each token's k most
// probable experts in descending order (ties: the lower index), else the
// caller's indices are read (k distinct experts per token, checked);
// weights[n, k] = probs at those experts, divided by their sum when normalize.
void moe_router_forward(const float* logits, float* probs, int64_t* indices, float* weights,
                        int64_t n, int64_t experts, int64_t k, bool normalize, bool choose_topk);
// dlogits += the softmax backward of dprobs, where dprobs is dweights at each
// token's k experts (through the division by their sum when normalize) and 0
// elsewhere.
void moe_router_backward(const float* probs, const int64_t* indices, const float* dweights,
                         float* dlogits, int64_t n, int64_t experts, int64_t k, bool normalize);
// Expert `expert`'s rows of x [tokens, c] (sequences of `seq` tokens): the
// tokens whose indices[., k] name it, in order of (sequence, choice,
// position) (choice-major within a sequence, as transformers' torch.where
// over the [k, N] mask orders them, per sequence); xe[rows, c] gets their
// rows and slots[rows] their slot token * k + choice. Rows beyond the tokens
// found are zeroed with slot -1 (a buffer sized for every token, moe_routing
// "topk"). Returns the rows found; more than `rows` throws std::out_of_range.
int64_t moe_dispatch_forward(const float* x, const int64_t* indices, float* xe, int64_t* slots,
                             int64_t tokens, int64_t seq, int64_t c, int64_t k, int64_t expert,
                             int64_t rows);
// dx[slot / k] += dxe[r] for each row with a slot (row order).
void moe_dispatch_backward(const float* dxe, const int64_t* slots, float* dx, int64_t rows,
                           int64_t c, int64_t k, int64_t tokens);
// out[tokens, c] = sum over experts e (in order) and their rows r (in order)
// with slot s = slots[e][r] >= 0 of weights[s] * y[e][r, :] at token s / k.
// Backward: dy[e][r] += weights[s] * dout[s / k]; dweights[s] += dot(dout[s /
// k], y[e][r]). `weighted` (nullable): per expert, an [rows[e], c] array that
// receives weights[s] * y[e][r, :] (0 for padding rows): the products
// Hugging Face's index_add_ keeps for backward (plan's moe_combine outputs).
void moe_combine_forward(const float* const* y, const int64_t* const* slots, const int64_t* rows,
                         int64_t experts, const float* weights, float* out, int64_t tokens,
                         int64_t c, int64_t k, float* const* weighted = nullptr);
void moe_combine_backward(const float* const* y, const int64_t* const* slots, const int64_t* rows,
                          int64_t experts, const float* weights, const float* dout,
                          float* const* dy, float* dweights, int64_t tokens, int64_t c, int64_t k);
// y[n, c] = sig[n] * x[n, c], sig = sigmoid(g[n]) (kept). Backward: dx += sig *
// dy; dg += sig (1 - sig) sum_c dy x.
void sigmoid_gate_forward(const float* g, const float* x, float* y, float* sig, int64_t n,
                          int64_t c);
void sigmoid_gate_backward(const float* sig, const float* x, const float* dy, float* dg, float* dx,
                           int64_t n, int64_t c);

}  // namespace shardscope::engine::cpu
