#include "traces/op_cost.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <utility>

namespace shardscope::traces {

namespace {

using Dims = std::vector<int64_t>;

// An unsigned count that remembers overflow or a negative input.
class Count {
 public:
  Count(uint64_t v = 0) : value_(v) {}  // implicit: counts mix with plain integers
  static Count dim(int64_t d) {
    Count c(d < 0 ? 0 : static_cast<uint64_t>(d));
    c.ok_ = d >= 0;
    return c;
  }
  friend Count operator*(Count a, Count b) {
    Count r;
    r.ok_ = a.ok_ && b.ok_ && !__builtin_mul_overflow(a.value_, b.value_, &r.value_);
    return r;
  }
  friend Count operator+(Count a, Count b) {
    Count r;
    r.ok_ = a.ok_ && b.ok_ && !__builtin_add_overflow(a.value_, b.value_, &r.value_);
    return r;
  }
  Count& operator+=(Count o) { return *this = *this + o; }
  bool ok() const { return ok_; }
  uint64_t value() const { return value_; }

 private:
  uint64_t value_ = 0;
  bool ok_ = true;
};

Count numel(const Dims& d) {
  Count n = 1;
  for (int64_t x : d) n = n * Count::dim(x);
  return n;
}

// The recorded inputs of one op.
struct Inputs {
  const std::vector<Dims>& dims;
  const std::vector<std::string>& types;
  const std::vector<std::string>& concrete;  // empty or one per input

  size_t size() const { return dims.size(); }
  // A tensor of a known dtype (a 0-dim tensor has dims []).
  bool tensor(size_t i) const { return i < size() && dtype_size(types[i]) > 0; }
  bool tensor_of_rank(size_t i, size_t rank) const { return tensor(i) && dims[i].size() == rank; }
  // An absent optional tensor: recorded as [] with type "".
  bool none(size_t i) const { return i < size() && dims[i].empty() && types[i].empty(); }
  size_t elem(size_t i) const { return dtype_size(types[i]); }
  const std::string* value(size_t i) const {
    return i < concrete.size() && !concrete[i].empty() ? &concrete[i] : nullptr;
  }
};

// What an op handler finds: FLOPs, bytes written, and which input (an out=
// tensor) is written rather than read.
struct Cost {
  bool ok = false;
  Count flops;
  Count written;
  size_t out_input = static_cast<size_t>(-1);
};

// ---- concrete inputs ("2", "False", "[2, 2]", "[True, False, True]") ------

bool parse_int(std::string_view s, int64_t* out) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  if (s.empty() || s.size() > 19) return false;
  const std::string text(s);
  char* end = nullptr;
  *out = std::strtoll(text.c_str(), &end, 10);
  return end == text.c_str() + text.size();
}

bool parse_bool(std::string_view s, bool* out) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  if (s == "True" || s == "true" || s == "1") return *out = true, true;
  if (s == "False" || s == "false" || s == "0") return *out = false, true;
  return false;
}

// "[a, b, ...]" split on commas; "[]" gives no items.
bool split_list(const std::string* s, std::vector<std::string_view>* items) {
  if (!s || s->size() < 2 || s->front() != '[' || s->back() != ']') return false;
  std::string_view body(s->data() + 1, s->size() - 2);
  items->clear();
  if (body.find_first_not_of(' ') == std::string_view::npos) return true;
  while (true) {
    const size_t comma = body.find(',');
    items->push_back(body.substr(0, comma));
    if (comma == std::string_view::npos) return true;
    body.remove_prefix(comma + 1);
  }
}

bool int_list(const std::string* s, std::vector<int64_t>* out) {
  std::vector<std::string_view> items;
  if (!split_list(s, &items)) return false;
  out->assign(items.size(), 0);
  for (size_t i = 0; i < items.size(); ++i)
    if (!parse_int(items[i], &(*out)[i])) return false;
  return true;
}

bool bool_list(const std::string* s, std::vector<bool>* out) {
  std::vector<std::string_view> items;
  if (!split_list(s, &items)) return false;
  out->clear();
  for (std::string_view item : items) {
    bool b = false;
    if (!parse_bool(item, &b)) return false;
    out->push_back(b);
  }
  return true;
}

// ---- matrix products ----------------------------------------------------

// flop_counter.py mm_flop: m * n * 2 * k.
Count mm_flops(int64_t m, int64_t n, int64_t k) {
  return Count::dim(m) * Count::dim(n) * 2 * Count::dim(k);
}

// True when `d` broadcasts to `to` (numpy rules, right-aligned).
bool broadcasts_to(const Dims& d, const Dims& to) {
  if (d.size() > to.size()) return false;
  for (size_t i = 0; i < d.size(); ++i) {
    const int64_t x = d[d.size() - 1 - i], y = to[to.size() - 1 - i];
    if (x != 1 && x != y) return false;
  }
  return true;
}

// The inputs [0, args) are the schema's; one more must be an out= tensor of
// the result's shape. Sets cost->out_input and the bytes written.
bool result(const Inputs& in, size_t args, const Dims& shape, size_t dtype_of, Cost* cost) {
  if (in.size() == args) {
    cost->written = numel(shape) * in.elem(dtype_of);
    return true;
  }
  if (in.size() != args + 1 || !in.tensor(args) || in.dims[args] != shape) return false;
  cost->out_input = args;
  cost->written = numel(shape) * in.elem(args);
  return true;
}

// aten::mm(self [m,k], mat2 [k,n]) and aten::addmm(self, mat1, mat2, beta,
// alpha) with self broadcast to [m,n] (flop_counter.py addmm_flop: the
// product only).
Cost matrix_product(const Inputs& in, bool with_bias) {
  Cost c;
  const size_t a = with_bias ? 1 : 0, args = with_bias ? 5 : 2;
  if (!in.tensor_of_rank(a, 2) || !in.tensor_of_rank(a + 1, 2)) return c;
  const Dims &x = in.dims[a], &y = in.dims[a + 1];
  if (x[1] != y[0]) return c;
  const Dims out = {x[0], y[1]};
  if (with_bias && !(in.tensor(0) && broadcasts_to(in.dims[0], out))) return c;
  c.flops = mm_flops(x[0], y[1], x[1]);
  c.ok = result(in, args, out, a, &c);
  return c;
}

// aten::bmm(self [b,m,k], mat2 [b,k,n]) and aten::baddbmm(self, batch1,
// batch2, beta, alpha) (flop_counter.py bmm_flop: b * m * n * 2 * k;
// baddbmm_flop: the product only).
Cost batched_product(const Inputs& in, bool with_bias) {
  Cost c;
  const size_t a = with_bias ? 1 : 0, args = with_bias ? 5 : 2;
  if (!in.tensor_of_rank(a, 3) || !in.tensor_of_rank(a + 1, 3)) return c;
  const Dims &x = in.dims[a], &y = in.dims[a + 1];
  if (x[0] != y[0] || x[2] != y[1]) return c;
  const Dims out = {x[0], x[1], y[2]};
  if (with_bias && !(in.tensor(0) && broadcasts_to(in.dims[0], out))) return c;
  c.flops = Count::dim(x[0]) * mm_flops(x[1], y[2], x[2]);
  c.ok = result(in, args, out, a, &c);
  return c;
}

// aten::matmul(self, other), torch.matmul's rules: 1-D x 1-D is a dot
// product; a 1-D self is [1, k] and a 1-D other [k, 1], the added dimension
// removed from the result; batch dimensions broadcast. FLOPs: those of the
// mm / bmm it runs (2 * batch * m * n * k). flop_counter.py has no formula
// for aten::mv and aten::dot, which matmul runs for a 1-D other: it counts
// 0 there; this counts their multiply-adds the same way (2 * m * k, 2 * k).
Cost matmul(const Inputs& in) {
  Cost c;
  if (!in.tensor(0) || !in.tensor(1)) return c;
  const Dims &a = in.dims[0], &b = in.dims[1];
  if (a.empty() || b.empty()) return c;
  const int64_t m = a.size() >= 2 ? a[a.size() - 2] : 1;
  const int64_t k = a.back();
  const int64_t k2 = b.size() >= 2 ? b[b.size() - 2] : b[0];
  const int64_t n = b.size() >= 2 ? b.back() : 1;
  if (k != k2) return c;
  const Dims batch_a(a.begin(),
                     a.end() - std::min<std::ptrdiff_t>(2, static_cast<std::ptrdiff_t>(a.size())));
  const Dims batch_b(b.begin(),
                     b.end() - std::min<std::ptrdiff_t>(2, static_cast<std::ptrdiff_t>(b.size())));
  Dims batch(std::max(batch_a.size(), batch_b.size()), 1);
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t x = i < batch_a.size() ? batch_a[batch_a.size() - 1 - i] : 1;
    const int64_t y = i < batch_b.size() ? batch_b[batch_b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) return c;
    batch[batch.size() - 1 - i] = x == 1 ? y : x;
  }
  Dims out = batch;
  if (a.size() >= 2) out.push_back(m);
  if (b.size() >= 2) out.push_back(n);
  c.flops = numel(batch) * mm_flops(m, n, k);
  c.ok = result(in, 2, out, 0, &c);
  return c;
}

// aten::linear(input [..., in], weight [out, in], bias [out] or None):
// input @ weight.T (+ bias), the addmm / matmul it runs: 2 * rows * out * in.
Cost linear(const Inputs& in) {
  Cost c;
  if (!in.tensor(0) || !in.tensor_of_rank(1, 2) || in.size() < 3) return c;
  const Dims &x = in.dims[0], &w = in.dims[1];
  if (x.empty() || x.back() != w[1]) return c;
  if (!in.none(2) && !(in.tensor_of_rank(2, 1) && in.dims[2][0] == w[0])) return c;
  Dims out(x.begin(), x.end() - 1);
  const Count rows = numel(out);
  out.push_back(w[0]);
  c.flops = rows * mm_flops(1, w[0], w[1]);
  c.ok = result(in, 3, out, 0, &c);
  return c;
}

// ---- attention ----------------------------------------------------------

struct Attention {
  bool backward = false;         // inputs start with grad_out
  bool seq_first = false;        // [B, L, H, E] (the _flash / _efficient kernels) not [B, H, L, E]
  std::vector<size_t> varlen;    // cum_seq / cu_seqlens inputs: must be None
  bool returns_weights = false;  // the math op also returns softmax(QK^T) [B, H, L, S]
};

// [B, H, L, E] of input i, from either layout.
bool bhle(const Inputs& in, size_t i, bool seq_first, Dims* out) {
  if (!in.tensor_of_rank(i, 4)) return false;
  const Dims& d = in.dims[i];
  *out = seq_first ? Dims{d[0], d[2], d[1], d[3]} : d;
  return true;
}

// flop_counter.py sdpa_flop_count (forward) and sdpa_backward_flop_count,
// each a sum of bmm_flop terms over b * h batches, (m x k x n) each:
//   forward  q @ k^T (L x E x S) + scores @ v (L x S x Ev)
//            = 2 B H L S (E + Ev)
//   backward recomputed q @ k^T (L E S), grad_out @ v^T (L Ev S),
//            scores^T @ grad_out (S L Ev), grad_scores @ k (L S E),
//            q^T @ grad_scores (E L S)
//            = 2 B H L S (3 E + 2 Ev)
// Its asserts become known == false: the same B and H for q, k, v (no
// grouped K/V heads), k's E equal to q's, v's S equal to k's, grad_out
// [B, H, L, Ev]. flop_counter.py feeds the non-nested _flash / _efficient
// kernels' [B, L, H, E] shapes to the same function unchanged, so it asserts
// when L != S and, when L == S, counts 2 B L H^2 (E + Ev) (H read as the
// sequence); they are reordered to [B, H, L, E] here, the layout the
// formula is written for.
Cost attention(const Inputs& in, const Attention& kind) {
  Cost c;
  const size_t q_at = kind.backward ? 1 : 0;
  Dims q, k, v;
  if (!bhle(in, q_at, kind.seq_first, &q) || !bhle(in, q_at + 1, kind.seq_first, &k) ||
      !bhle(in, q_at + 2, kind.seq_first, &v))
    return c;
  for (size_t i : kind.varlen)
    if (i < in.size() && !in.none(i)) return c;  // variable-length batch: lengths unknown
  const int64_t B = q[0], H = q[1], L = q[2], E = q[3], S = k[2], Ev = v[3];
  if (k[0] != B || v[0] != B || k[1] != H || v[1] != H || k[3] != E || v[2] != S) return c;
  const Count bh = Count::dim(B) * Count::dim(H);
  if (!kind.backward) {
    c.flops = bh * (mm_flops(L, S, E) + mm_flops(L, Ev, S));
    c.written = numel(Dims{B, H, L, Ev}) * in.elem(q_at);
    if (kind.returns_weights) c.written += numel(Dims{B, H, L, S}) * in.elem(q_at);
  } else {
    Dims grad_out;
    if (!bhle(in, 0, kind.seq_first, &grad_out) || grad_out != Dims{B, H, L, Ev}) return c;
    c.flops = bh * (mm_flops(L, S, E) + mm_flops(L, S, Ev) + mm_flops(S, Ev, L) +
                    mm_flops(L, E, S) + mm_flops(E, S, L));
    // grad_query, grad_key, grad_value (a grad of attn_bias is not counted).
    for (size_t i = q_at; i < q_at + 3; ++i) c.written += numel(in.dims[i]) * in.elem(i);
  }
  c.ok = true;
  return c;
}

// ---- convolution --------------------------------------------------------

// The parameters of aten::convolution (and the ops that share its meaning).
struct ConvParams {
  std::vector<int64_t> stride, padding, dilation, output_padding;
  bool transposed = false;
  int64_t groups = 1;
};

// A per-spatial-dimension list of length 1 (expanded) or `n`.
bool expand(std::vector<int64_t>* v, size_t n) {
  if (v->size() == 1) v->assign(n, v->front());
  return v->size() == n;
}

// The output's spatial size along each dimension, from the input's (as
// ATen's conv_output_size / conv_input_size for transposed ones).
bool conv_spatial(const Dims& x, const Dims& w, ConvParams p, Dims* out) {
  const size_t n = x.size() - 2;
  if (!expand(&p.stride, n) || !expand(&p.padding, n) || !expand(&p.dilation, n) ||
      !expand(&p.output_padding, n))
    return false;
  out->clear();
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = x[i + 2], k = w[i + 2], s = p.stride[i], pad = p.padding[i];
    const int64_t d = p.dilation[i], op = p.output_padding[i];
    if (s < 1 || d < 1 || pad < 0 || op < 0 || k < 1) return false;
    const int64_t extent = d * (k - 1) + 1;
    const int64_t size =
        p.transposed ? (in - 1) * s - 2 * pad + extent + op : (in + 2 * pad - extent) / s + 1;
    if (size < 1 || (!p.transposed && in + 2 * pad < extent)) return false;
    out->push_back(size);
  }
  return true;
}

// Channels: input x [N, Cin, ...], weight w [Cout, Cin / groups, k...], or
// transposed [Cin, Cout / groups, k...]. The output's channel count.
bool conv_channels(const Dims& x, const Dims& w, const ConvParams& p, int64_t* c_out) {
  if (x.size() < 3 || x.size() != w.size() || p.groups < 1 || w[0] % p.groups != 0) return false;
  if (p.transposed) {
    *c_out = w[1] * p.groups;
    return x[1] == w[0];
  }
  *c_out = w[0];
  return x[1] == w[1] * p.groups;
}

// flop_counter.py conv_flop_count: prod(conv_shape) * prod(filter_size) *
// batch_size * c_out * c_in * 2, with c_out, c_in = w[0], w[1] (so c_in is
// Cin / groups) and conv_shape the output's spatial size, or the input's
// when transposed.
Count conv_flop_count(const Dims& x, const Dims& w, const Dims& out, bool transposed) {
  const Dims& conv = transposed ? x : out;
  return numel(Dims(conv.begin() + 2, conv.end())) * numel(Dims(w.begin() + 2, w.end())) *
         Count::dim(x[0]) * Count::dim(w[0]) * Count::dim(w[1]) * 2;
}

// Positions of the parameters among an op's inputs.
struct ConvLayout {
  size_t bias, stride, padding, dilation, transposed, output_padding, groups;  // npos: absent
};
constexpr size_t kAbsent = static_cast<size_t>(-1);

bool conv_params(const Inputs& in, const ConvLayout& at, ConvParams* p) {
  if (in.concrete.size() != in.size()) return false;  // not recorded
  if (!int_list(in.value(at.stride), &p->stride) || !int_list(in.value(at.padding), &p->padding) ||
      !int_list(in.value(at.dilation), &p->dilation) || !in.value(at.groups) ||
      !parse_int(*in.value(at.groups), &p->groups))
    return false;
  p->transposed = false;
  if (at.transposed != kAbsent &&
      !(in.value(at.transposed) && parse_bool(*in.value(at.transposed), &p->transposed)))
    return false;
  p->output_padding = {0};
  if (at.output_padding != kAbsent && !int_list(in.value(at.output_padding), &p->output_padding))
    return false;
  return true;
}

// aten::convolution / _convolution (input, weight, bias, stride, padding,
// dilation, transposed, output_padding, groups, ...) and cudnn_convolution
// (self, weight, padding, stride, dilation, groups, ...): flop_counter.py
// conv_flop (the bias not counted). flop_counter.py reads cudnn_convolution
// with convolution's argument positions (its "transposed" is then the
// benchmark flag); this reads it by its own schema.
Cost convolution(const Inputs& in, const ConvLayout& at, size_t args) {
  Cost c;
  ConvParams p;
  if (in.size() < args || !in.tensor(0) || !in.tensor(1) || !conv_params(in, at, &p)) return c;
  const Dims &x = in.dims[0], &w = in.dims[1];
  int64_t c_out = 0;
  Dims spatial;
  if (!conv_channels(x, w, p, &c_out) || !conv_spatial(x, w, p, &spatial)) return c;
  if (at.bias != kAbsent && !in.none(at.bias) &&
      !(in.tensor_of_rank(at.bias, 1) && in.dims[at.bias][0] == c_out))
    return c;
  Dims out = {x[0], c_out};
  out.insert(out.end(), spatial.begin(), spatial.end());
  c.flops = conv_flop_count(x, w, out, p.transposed);
  c.ok = result(in, args, out, 0, &c);
  return c;
}

// aten::convolution_backward(grad_output, input, weight, bias_sizes, stride,
// padding, dilation, transposed, output_padding, groups, output_mask):
// flop_counter.py conv_backward_flop, term by term:
//   output_mask[0] grad_input  = conv_flop_count(grad_out, w, x, !transposed)
//   output_mask[1] grad_weight = conv_flop_count(t(x), t(grad_out), t(w)), or
//                  (t(grad_out), t(x), t(w)) when transposed; t swaps dims 0, 1
// The grad_weight term has c_in = the full input (or grad_out) channel count:
// with groups > 1 it is groups times the grad_weight multiply-adds; followed
// as written, to match FlopCounterMode. grad_bias: no FLOPs.
Cost convolution_backward(const Inputs& in) {
  Cost c;
  ConvParams p;
  std::vector<bool> mask;
  const ConvLayout at = {kAbsent, 4, 5, 6, 7, 8, 9};
  if (in.size() != 11) return c;  // 14: the out= form, not modelled
  if (!in.tensor(0) || !in.tensor(1) || !in.tensor(2) || !conv_params(in, at, &p) ||
      !bool_list(in.value(10), &mask) || mask.size() != 3)
    return c;
  const Dims &grad_out = in.dims[0], &x = in.dims[1], &w = in.dims[2];
  int64_t c_out = 0;
  Dims spatial;
  if (!conv_channels(x, w, p, &c_out) || !conv_spatial(x, w, p, &spatial)) return c;
  Dims out = {x[0], c_out};
  out.insert(out.end(), spatial.begin(), spatial.end());
  if (grad_out != out) return c;
  const auto t = [](Dims d) {
    std::swap(d[0], d[1]);
    return d;
  };
  if (mask[0]) {
    c.flops += conv_flop_count(grad_out, w, x, !p.transposed);
    c.written += numel(x) * in.elem(1);
  }
  if (mask[1]) {
    c.flops += p.transposed ? conv_flop_count(t(grad_out), t(x), t(w), false)
                            : conv_flop_count(t(x), t(grad_out), t(w), false);
    c.written += numel(w) * in.elem(2);
  }
  if (mask[2]) c.written += Count::dim(c_out) * in.elem(0);
  c.ok = true;
  return c;
}

Cost dispatch(std::string_view op, const Inputs& in) {
  if (op.substr(0, 6) != "aten::") return {};
  op.remove_prefix(6);
  if (op == "mm") return matrix_product(in, false);
  if (op == "addmm") return matrix_product(in, true);
  if (op == "bmm") return batched_product(in, false);
  if (op == "baddbmm") return batched_product(in, true);
  if (op == "matmul") return matmul(in);
  if (op == "linear") return linear(in);
  // Forward: (query, key, value, ...); backward: (grad_out, query, key, value, ...).
  if (op == "_scaled_dot_product_flash_attention" ||
      op == "_scaled_dot_product_efficient_attention" ||
      op == "_scaled_dot_product_cudnn_attention")
    return attention(in, {});
  if (op == "_scaled_dot_product_flash_attention_backward")
    return attention(in, {true, false, {6, 7}});
  if (op == "_scaled_dot_product_efficient_attention_backward")
    return attention(in, {true, false, {}});
  if (op == "_scaled_dot_product_cudnn_attention_backward")
    return attention(in, {true, false, {9, 10}});
  if (op == "_scaled_dot_product_attention_math") return attention(in, {false, false, {}, true});
  if (op == "_flash_attention_forward") return attention(in, {false, true, {3, 4}});
  if (op == "_flash_attention_backward") return attention(in, {true, true, {6, 7}});
  if (op == "_efficient_attention_forward") return attention(in, {false, true, {4, 5}});
  if (op == "_efficient_attention_backward") return attention(in, {true, true, {6, 7}});
  if (op == "convolution") return convolution(in, {2, 3, 4, 5, 6, 7, 8}, 9);
  if (op == "_convolution")
    return convolution(in, {2, 3, 4, 5, 6, 7, 8}, in.size() >= 13 ? 13 : 12);
  if (op == "cudnn_convolution") return convolution(in, {kAbsent, 3, 2, 4, kAbsent, kAbsent, 5}, 9);
  if (op == "convolution_backward") return convolution_backward(in);
  return {};
}

}  // namespace

size_t dtype_size(std::string_view type) {
  static const std::pair<std::string_view, size_t> kSizes[] = {
      {"float", 4},
      {"double", 8},
      {"c10::Half", 2},
      {"c10::BFloat16", 2},
      {"long int", 8},
      {"long", 8},  // clang's spelling of int64_t
      {"int64", 8},
      {"int", 4},
      {"short int", 2},
      {"short", 2},
      {"signed char", 1},
      {"unsigned char", 1},
      {"bool", 1},
      {"short unsigned int", 2},
      {"unsigned int", 4},
      {"long unsigned int", 8},
      {"c10::Float8_e4m3fn", 1},
      {"c10::Float8_e5m2", 1},
      {"c10::Float8_e4m3fnuz", 1},
      {"c10::Float8_e5m2fnuz", 1},
      {"c10::Float8_e8m0fnu", 1},
      {"c10::complex<c10::Half>", 4},
      {"c10::complex<float>", 8},
      {"c10::complex<double>", 16},
  };
  for (const auto& [name, size] : kSizes)
    if (type == name) return size;
  return 0;
}

OpCost op_cost(std::string_view op_name, const std::vector<std::vector<int64_t>>& input_dims,
               const std::vector<std::string>& input_types,
               const std::vector<std::string>& concrete_inputs) {
  OpCost out;
  if (input_types.size() != input_dims.size()) return out;
  if (!concrete_inputs.empty() && concrete_inputs.size() != input_dims.size()) return out;
  const Inputs in{input_dims, input_types, concrete_inputs};
  const Cost c = dispatch(op_name, in);
  if (!c.ok) return out;
  // Every tensor input is read once, but an out= tensor, which is written.
  Count bytes = c.written;
  for (size_t i = 0; i < in.size(); ++i) {
    if (i == c.out_input) continue;
    if (in.tensor(i)) {
      bytes += numel(in.dims[i]) * in.elem(i);
    } else if (!in.dims[i].empty()) {
      return out;  // dims but no known dtype: an unknown element size
    }
  }
  if (!c.flops.ok() || !bytes.ok()) return out;
  out.flops = c.flops.value();
  out.bytes = bytes.value();
  out.known = true;
  const std::string_view op = op_name.substr(6);  // dispatch() knew "aten::"
  if (op.find("attention") != std::string_view::npos)
    out.op_type = "attention";
  else if (op.find("convolution") == std::string_view::npos)
    out.op_type = "linear";  // mm, addmm, bmm, baddbmm, matmul, linear
  return out;
}

}  // namespace shardscope::traces
