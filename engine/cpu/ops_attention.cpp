// Causal grouped-query attention with optional RoPE, score soft-capping and
// sliding window, flash-style: the forward
// keeps one row of scores per query (no T x T matrix) and saves only the
// log-sum-exp of each query's scores; the backward recomputes the
// probabilities from q, k and lse.
//
// Work is done per (batch b, kv head hk): that head's keys are roped once and
// transposed into kt [D, T] so that the scores of one query are D axpy passes
// over contiguous rows (vectorisable, fixed order); the H / Hkv query heads of
// the group then run one after another. Every sum has a fixed order, so results
// do not depend on threads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/cpu/check.h"
#include "engine/cpu/ops.h"

namespace shardscope::engine::cpu {

using detail::require;
using detail::require_ptr;

namespace {

// cos/sin [T, R/2] of angle t * inv_freq[i], inv_freq[i] = theta^(-2i/R)
// (R = rotary_dim, the head_dim unless the rotary is partial), as Hugging
// Face's LlamaRotaryEmbedding / GPTNeoXRotaryEmbedding do in fp32: inv_freq
// rounded to float (torch evaluates the power in float: may differ by an ulp),
// then the product t * inv_freq and its cos/sin in float.
struct RopeTable {
  int64_t half = 0;                 // R/2
  int64_t head_dim = 0;             // D: elements R.. of a head pass through
  std::vector<float> cos_t, sin_t;  // [T, R/2]

  RopeTable(int64_t seq, int64_t rotary_dim, int64_t head_size, double theta)
      : half(rotary_dim / 2), head_dim(head_size) {
    cos_t.resize(static_cast<size_t>(seq * half));
    sin_t.resize(cos_t.size());
    for (int64_t i = 0; i < half; ++i) {
      const float inv_freq = static_cast<float>(
          1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(rotary_dim)));
      for (int64_t t = 0; t < seq; ++t) {
        const float angle = static_cast<float>(t) * inv_freq;
        cos_t[t * half + i] = std::cos(angle);  // float cos/sin, as torch evaluates them
        sin_t[t * half + i] = std::sin(angle);
      }
    }
  }

  // y = x * cos + rotate_half(x) * sin at position t on the first R elements
  // (element i pairs with i + R/2); y = x on the rest.
  void apply(const float* x, float* y, int64_t t) const {
    const float* c = cos_t.data() + t * half;
    const float* s = sin_t.data() + t * half;
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = x[i], x2 = x[i + half];
      y[i] = x1 * c[i] - x2 * s[i];
      y[i + half] = x2 * c[i] + x1 * s[i];
    }
    for (int64_t i = 2 * half; i < head_dim; ++i) y[i] = x[i];
  }
  // The transpose (= inverse) rotation, for gradients: dx = R^T dy.
  void apply_transpose(const float* dy, float* dx, int64_t t) const {
    const float* c = cos_t.data() + t * half;
    const float* s = sin_t.data() + t * half;
    for (int64_t i = 0; i < half; ++i) {
      const float d1 = dy[i], d2 = dy[i + half];
      dx[i] = d1 * c[i] + d2 * s[i];
      dx[i + half] = d2 * c[i] - d1 * s[i];
    }
    for (int64_t i = 2 * half; i < head_dim; ++i) dx[i] = dy[i];
  }
};

int64_t head_stride_of(const AttentionShape& s, int64_t head_stride) {
  return head_stride == 0 ? s.head_dim : head_stride;
}

int64_t rotary_dim_of(const AttentionShape& s) {
  return s.rotary_dim == 0 ? s.head_dim : s.rotary_dim;
}

void check_attention(const char* fn, const AttentionShape& s, int64_t q_stride, int64_t kv_stride,
                     int64_t head_stride) {
  auto positive = [&](const char* name, int64_t v) {
    require(v >= 1, fn, std::string(name) + " = " + std::to_string(v) + " < 1");
  };
  require(s.batch >= 0, fn, "batch = " + std::to_string(s.batch) + " < 0");
  require(s.seq >= 0, fn, "seq = " + std::to_string(s.seq) + " < 0");
  positive("n_head", s.n_head);
  positive("n_kv_head", s.n_kv_head);
  positive("head_dim", s.head_dim);
  require(s.n_head % s.n_kv_head == 0, fn,
          "n_head " + std::to_string(s.n_head) + " is not a multiple of n_kv_head " +
              std::to_string(s.n_kv_head));
  require(std::isfinite(s.scale), fn, "scale is not finite");
  require(s.softcap >= 0.0 && std::isfinite(s.softcap), fn, "softcap must be finite and >= 0");
  require(s.sliding_window >= 0, fn, "sliding_window < 0");
  require(s.rotary_dim >= 0 && s.rotary_dim <= s.head_dim, fn,
          "rotary_dim " + std::to_string(s.rotary_dim) + " is not in [0, head_dim " +
              std::to_string(s.head_dim) + "]");
  if (s.rope) {
    const int64_t r = rotary_dim_of(s);
    if (r % 2 != 0)
      throw std::invalid_argument(std::string(fn) + ": rope needs an even " +
                                  (s.rotary_dim == 0 ? "head_dim" : "rotary_dim") + ", got " +
                                  std::to_string(r));
    require(s.rope_theta > 0.0 && std::isfinite(s.rope_theta), fn,
            "rope_theta must be finite and > 0");
  }
  const int64_t hs = head_stride_of(s, head_stride);
  require(hs >= s.head_dim, fn,
          "head_stride " + std::to_string(hs) + " < head_dim " + std::to_string(s.head_dim));
  require(q_stride >= (s.n_head - 1) * hs + s.head_dim, fn,
          "q_stride " + std::to_string(q_stride) + " < (n_head - 1) * head_stride + head_dim " +
              std::to_string((s.n_head - 1) * hs + s.head_dim));
  require(kv_stride >= (s.n_kv_head - 1) * hs + s.head_dim, fn,
          "kv_stride " + std::to_string(kv_stride) +
              " < (n_kv_head - 1) * head_stride + head_dim " +
              std::to_string((s.n_kv_head - 1) * hs + s.head_dim));
}

// Scratch of one (b, kv head) group; sized once per call.
struct KeyScratch {
  std::vector<float> kt;    // [D, T] roped keys, transposed
  std::vector<float> krow;  // [D] one roped key
  KeyScratch(int64_t seq, int64_t head_dim)
      : kt(static_cast<size_t>(seq * head_dim)), krow(static_cast<size_t>(head_dim)) {}
};

// Fills ks.kt with the (roped) keys of batch b, kv head hk; kr (optional, [T, D])
// receives them row-major too.
void gather_keys(const AttentionShape& s, const QkvView& qkv, const RopeTable* rope, int64_t b,
                 int64_t hk, KeyScratch& ks, float* kr) {
  const int64_t T = s.seq, D = s.head_dim, hs = head_stride_of(s, qkv.head_stride);
  for (int64_t t = 0; t < T; ++t) {
    const float* src = qkv.k + (b * T + t) * qkv.kv_stride + hk * hs;
    float* row = kr != nullptr ? kr + t * D : ks.krow.data();
    if (rope != nullptr) {
      rope->apply(src, row, t);
    } else {
      std::copy(src, src + D, row);
    }
    for (int64_t d = 0; d < D; ++d) ks.kt[d * T + t] = row[d];
  }
}

// q row of (b, t, head h), roped, times scale -> qrow [D].
void load_query(const AttentionShape& s, const QkvView& qkv, const RopeTable* rope, int64_t b,
                int64_t t, int64_t h, float scale, float* tmp, float* qrow) {
  const int64_t D = s.head_dim;
  const float* src =
      qkv.q + (b * s.seq + t) * qkv.q_stride + h * head_stride_of(s, qkv.head_stride);
  if (rope != nullptr) {
    rope->apply(src, tmp, t);
    src = tmp;
  }
  for (int64_t d = 0; d < D; ++d) qrow[d] = src[d] * scale;
}

// scores[j] = sum_d row[d] * cols[d * seq + j] for j in [0, t] (the causal
// prefix): the query's scores from kt [D, T], or dout's products with the
// values from vt. Four d at a time, so each pass over scores does four FMAs
// per load/store; fixed order, vectorised over j.
void causal_scores(const float* __restrict row, const float* __restrict cols, int64_t seq,
                   int64_t head_dim, int64_t t, float* __restrict scores) {
  for (int64_t j = 0; j <= t; ++j) scores[j] = 0.0f;
  int64_t d = 0;
  for (; d + 4 <= head_dim; d += 4) {
    const float r0 = row[d], r1 = row[d + 1], r2 = row[d + 2], r3 = row[d + 3];
    const float* __restrict c0 = cols + d * seq;
    const float* __restrict c1 = c0 + seq;
    const float* __restrict c2 = c1 + seq;
    const float* __restrict c3 = c2 + seq;
    for (int64_t j = 0; j <= t; ++j)
      scores[j] += (r0 * c0[j] + r1 * c1[j]) + (r2 * c2[j] + r3 * c3[j]);
  }
  for (; d < head_dim; ++d) {
    const float r = row[d];
    const float* __restrict c = cols + d * seq;
    for (int64_t j = 0; j <= t; ++j) scores[j] += r * c[j];
  }
}

// acc[d] = sum_{j <= t} p[j] * v_j[d], v_j = v + j * stride; four j at a time.
void weighted_rows(const float* __restrict p, const float* v, int64_t stride, int64_t head_dim,
                   int64_t t, float* __restrict acc) {
  for (int64_t d = 0; d < head_dim; ++d) acc[d] = 0.0f;
  int64_t j = 0;
  for (; j + 4 <= t + 1; j += 4) {
    const float p0 = p[j], p1 = p[j + 1], p2 = p[j + 2], p3 = p[j + 3];
    const float* __restrict v0 = v + j * stride;
    const float* __restrict v1 = v0 + stride;
    const float* __restrict v2 = v1 + stride;
    const float* __restrict v3 = v2 + stride;
    for (int64_t d = 0; d < head_dim; ++d)
      acc[d] += (p0 * v0[d] + p1 * v1[d]) + (p2 * v2[d] + p3 * v3[d]);
  }
  for (; j <= t; ++j) {
    const float pj = p[j];
    const float* __restrict vj = v + j * stride;
    for (int64_t d = 0; d < head_dim; ++d) acc[d] += pj * vj[d];
  }
}

// First key query t sees: t - W + 1 with a sliding window W, else 0.
int64_t first_key(const AttentionShape& s, int64_t t) {
  return s.sliding_window > 0 ? std::max<int64_t>(0, t - s.sliding_window + 1) : 0;
}

}  // namespace

void attention_forward(const AttentionShape& s, const QkvView& qkv, float* out, float* lse) {
  const char* fn = "attention_forward";
  check_attention(fn, s, qkv.q_stride, qkv.kv_stride, qkv.head_stride);
  const int64_t B = s.batch, T = s.seq, H = s.n_head, Hkv = s.n_kv_head, D = s.head_dim;
  const int64_t hs = head_stride_of(s, qkv.head_stride);
  const int64_t rows = B * T;
  require_ptr(fn, "q", qkv.q, rows);
  require_ptr(fn, "k", qkv.k, rows);
  require_ptr(fn, "v", qkv.v, rows);
  require_ptr(fn, "out", out, rows * H * D);
  require_ptr(fn, "lse", lse, rows * H);
  if (rows == 0) return;
  const int64_t group = H / Hkv;
  const float scale = static_cast<float>(s.scale);
  const RopeTable rope_table =
      s.rope ? RopeTable(T, rotary_dim_of(s), D, s.rope_theta) : RopeTable(0, 0, 0, 1.0);
  const RopeTable* rope = s.rope ? &rope_table : nullptr;

  const float cap = static_cast<float>(s.softcap);
  KeyScratch ks(T, D);
  std::vector<float> qrow(static_cast<size_t>(D)), tmp(static_cast<size_t>(D)),
      acc(static_cast<size_t>(D)), scores(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t hk = 0; hk < Hkv; ++hk) {
      gather_keys(s, qkv, rope, b, hk, ks, nullptr);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          load_query(s, qkv, rope, b, t, h, scale, tmp.data(), qrow.data());
          causal_scores(qrow.data(), ks.kt.data(), T, D, t, scores.data());
          if (cap > 0.0f)
            for (int64_t j = 0; j <= t; ++j) scores[j] = cap * std::tanh(scores[j] / cap);
          // Keys before the window get probability 0 (exp(-inf)).
          for (int64_t j = 0, lo = first_key(s, t); j < lo; ++j)
            scores[j] = -std::numeric_limits<float>::infinity();
          float max_score = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j <= t; ++j) max_score = std::max(max_score, scores[j]);
          double denom = 0.0;
          for (int64_t j = 0; j <= t; ++j) {
            scores[j] = std::exp(scores[j] - max_score);  // unnormalised probability
            denom += scores[j];
          }
          weighted_rows(scores.data(), qkv.v + b * T * qkv.kv_stride + hk * hs, qkv.kv_stride, D, t,
                        acc.data());
          const float inv_denom = static_cast<float>(1.0 / denom);
          float* o = out + (b * T + t) * H * D + h * D;
          for (int64_t d = 0; d < D; ++d) o[d] = acc[d] * inv_denom;
          lse[(b * H + h) * T + t] = max_score + static_cast<float>(std::log(denom));
        }
      }
    }
  }
}

void attention_backward(const AttentionShape& s, const QkvView& qkv, const float* out,
                        const float* lse, const float* dout, const QkvGrad& grad) {
  const char* fn = "attention_backward";
  check_attention(fn, s, qkv.q_stride, qkv.kv_stride, qkv.head_stride);
  // The gradients have their own row strides (q read from a [B, T, H*D]
  // copy, its gradient written into a packed buffer); heads are spaced alike.
  require(grad.head_stride == qkv.head_stride, fn,
          "gradient head_stride differs from the input head_stride");
  check_attention(fn, s, grad.q_stride, grad.kv_stride, grad.head_stride);
  const int64_t B = s.batch, T = s.seq, H = s.n_head, Hkv = s.n_kv_head, D = s.head_dim;
  const int64_t hs = head_stride_of(s, qkv.head_stride);
  const int64_t rows = B * T;
  require_ptr(fn, "q", qkv.q, rows);
  require_ptr(fn, "k", qkv.k, rows);
  require_ptr(fn, "v", qkv.v, rows);
  require_ptr(fn, "out", out, rows * H * D);
  require_ptr(fn, "lse", lse, rows * H);
  require_ptr(fn, "dout", dout, rows * H * D);
  require_ptr(fn, "dq", grad.dq, rows);
  require_ptr(fn, "dk", grad.dk, rows);
  require_ptr(fn, "dv", grad.dv, rows);
  if (rows == 0) return;
  const int64_t group = H / Hkv;
  const float scale = static_cast<float>(s.scale);
  const RopeTable rope_table =
      s.rope ? RopeTable(T, rotary_dim_of(s), D, s.rope_theta) : RopeTable(0, 0, 0, 1.0);
  const RopeTable* rope = s.rope ? &rope_table : nullptr;

  const auto td = static_cast<size_t>(T * D);
  KeyScratch ks(T, D);
  std::vector<float> kr(td);      // [T, D] roped keys, row-major
  std::vector<float> vt(td);      // [D, T] values, transposed
  std::vector<float> dk_acc(td);  // [T, D] gradient of the roped keys of this group
  std::vector<float> dv_acc(td);  // [T, D]
  // Queries are processed kRows at a time so that the rank-kRows updates of
  // dk_acc and dv_acc do kRows FMAs per load/store. Rows past T are zero.
  constexpr int64_t kRows = 4;  // the rank update below is written out for 4 rows
  const auto rows_t = static_cast<size_t>(kRows * T), rows_d = static_cast<size_t>(kRows * D);
  std::vector<float> prob(rows_t);    // [kRows, T] probabilities, 0 where masked
  std::vector<float> dscore(rows_t);  // [kRows, T] d loss / d (scaled score), 0 where masked
  std::vector<float> qblock(rows_d);  // [kRows, D] roped, scaled queries
  std::vector<float> gblock(rows_d);  // [kRows, D] dout rows
  std::vector<float> tmp(static_cast<size_t>(D)), dqrow(static_cast<size_t>(D));
  std::vector<float> cap_grad(static_cast<size_t>(T));  // one query row's 1 - tanh^2
  const float cap = static_cast<float>(s.softcap);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t hk = 0; hk < Hkv; ++hk) {
      gather_keys(s, qkv, rope, b, hk, ks, kr.data());
      for (int64_t t = 0; t < T; ++t) {
        const float* vsrc = qkv.v + (b * T + t) * qkv.kv_stride + hk * hs;
        for (int64_t d = 0; d < D; ++d) vt[d * T + t] = vsrc[d];
      }
      std::fill(dk_acc.begin(), dk_acc.end(), 0.0f);
      std::fill(dv_acc.begin(), dv_acc.end(), 0.0f);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        for (int64_t t0 = 0; t0 < T; t0 += kRows) {
          const int64_t last = std::min(t0 + kRows, T) - 1;  // last query row of the block
          for (int64_t r = 0; r < kRows; ++r) {
            const int64_t t = t0 + r;
            float* p = prob.data() + r * T;
            float* ds = dscore.data() + r * T;
            float* qr = qblock.data() + r * D;
            float* g = gblock.data() + r * D;
            if (t > last) {  // padding row of the last block
              std::fill(p, p + last + 1, 0.0f);
              std::fill(ds, ds + last + 1, 0.0f);
              std::fill(qr, qr + D, 0.0f);
              std::fill(g, g + D, 0.0f);
              continue;
            }
            load_query(s, qkv, rope, b, t, h, scale, tmp.data(), qr);
            causal_scores(qr, ks.kt.data(), T, D, t, p);
            if (cap > 0.0f)  // capped scores; cap_grad = d capped / d score = 1 - tanh^2
              for (int64_t j = 0; j <= t; ++j) {
                const float th = std::tanh(p[j] / cap);
                p[j] = cap * th;
                cap_grad[j] = 1.0f - th * th;
              }
            const float row_lse = lse[(b * H + h) * T + t];
            const int64_t lo = first_key(s, t);
            for (int64_t j = 0; j <= t; ++j) p[j] = j < lo ? 0.0f : std::exp(p[j] - row_lse);
            const float* o = out + (b * T + t) * H * D + h * D;
            const float* dout_row = dout + (b * T + t) * H * D + h * D;
            std::copy(dout_row, dout_row + D, g);
            // delta = dout . out = sum_j p_j (dout . v_j): the softmax backward's row term.
            float delta = 0.0f;
            for (int64_t d = 0; d < D; ++d) delta += g[d] * o[d];
            // dprob[j] = dout . v_j (into ds), from vt as the scores are from kt.
            causal_scores(g, vt.data(), T, D, t, ds);
            for (int64_t j = 0; j <= t; ++j) ds[j] = p[j] * (ds[j] - delta);
            if (cap > 0.0f)
              for (int64_t j = 0; j <= t; ++j) ds[j] *= cap_grad[j];
            for (int64_t j = t + 1; j <= last; ++j) p[j] = ds[j] = 0.0f;
            // dq = scale * sum_j dscore_j k_j, then back through the rotation.
            weighted_rows(ds, kr.data(), D, D, t, dqrow.data());
            for (int64_t d = 0; d < D; ++d) dqrow[d] *= scale;
            float* dq = grad.dq + (b * T + t) * grad.q_stride + h * hs;
            if (rope != nullptr) {
              rope->apply_transpose(dqrow.data(), tmp.data(), t);
              for (int64_t d = 0; d < D; ++d) dq[d] += tmp[d];
            } else {
              for (int64_t d = 0; d < D; ++d) dq[d] += dqrow[d];
            }
          }
          // dv_j += sum_r p_r[j] dout_r; dk_j += sum_r dscore_r[j] q_r (q_r carries the scale).
          const float *g0 = gblock.data(), *g1 = g0 + D, *g2 = g1 + D, *g3 = g2 + D;
          const float *q0 = qblock.data(), *q1 = q0 + D, *q2 = q1 + D, *q3 = q2 + D;
          for (int64_t j = 0; j <= last; ++j) {
            const float p0 = prob[j], p1 = prob[T + j], p2 = prob[2 * T + j], p3 = prob[3 * T + j];
            const float s0 = dscore[j], s1 = dscore[T + j], s2 = dscore[2 * T + j],
                        s3 = dscore[3 * T + j];
            float* __restrict dvj = dv_acc.data() + j * D;
            float* __restrict dkj = dk_acc.data() + j * D;
            for (int64_t d = 0; d < D; ++d) {
              dvj[d] += (p0 * g0[d] + p1 * g1[d]) + (p2 * g2[d] + p3 * g3[d]);
              dkj[d] += (s0 * q0[d] + s1 * q1[d]) + (s2 * q2[d] + s3 * q3[d]);
            }
          }
        }
      }
      for (int64_t t = 0; t < T; ++t) {
        float* dk = grad.dk + (b * T + t) * grad.kv_stride + hk * hs;
        float* dv = grad.dv + (b * T + t) * grad.kv_stride + hk * hs;
        const float* dkr = dk_acc.data() + t * D;
        const float* dvr = dv_acc.data() + t * D;
        if (rope != nullptr) {
          rope->apply_transpose(dkr, tmp.data(), t);
          for (int64_t d = 0; d < D; ++d) dk[d] += tmp[d];
        } else {
          for (int64_t d = 0; d < D; ++d) dk[d] += dkr[d];
        }
        for (int64_t d = 0; d < D; ++d) dv[d] += dvr[d];
      }
    }
  }
}

}  // namespace shardscope::engine::cpu
