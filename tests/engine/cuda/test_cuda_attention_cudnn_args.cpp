// The cuDNN attention's refusals, graph-cache key and index math, on any
// machine: every check throws std::invalid_argument (or, for an unprepared
// key, std::logic_error) before the first CUDA or cuDNN call. The pointers
// below are never dereferenced.
#include <array>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/attention_cudnn.h"
#include "engine/cuda/ops/attention_cudnn_layout.h"
#include "engine/cuda/ops/ops.h"

namespace shardscope::engine::cuda {
namespace {

using Catch::Matchers::Contains;
using plan::DType;

template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("the expected exception was not thrown");
  return {};
}

// GPT-2 small's attention at B = 2, T = 17: packed qkv (stride 3 * 768).
AttentionShape gpt2_shape() {
  AttentionShape s;
  s.batch = 2;
  s.seq = 17;
  s.n_head = 12;
  s.n_kv_head = 12;
  s.head_dim = 64;
  s.scale = 0.125;
  return s;
}

CudnnAttentionKey key_of(const AttentionShape& s, DType dt = DType::bf16,
                         CudnnDirection d = CudnnDirection::forward, bool deterministic = false,
                         int64_t q_stride = 3 * 768, int64_t kv_stride = 3 * 768) {
  return cudnn_attention_key("attention", s, dt, q_stride, kv_stride, d, deterministic);
}

std::string key_refusal(const AttentionShape& s, DType dt = DType::bf16, int64_t q_stride = 3 * 768,
                        int64_t kv_stride = 3 * 768) {
  return message_of<std::invalid_argument>(
      [&] { key_of(s, dt, CudnnDirection::forward, false, q_stride, kv_stride); });
}

TEST_CASE("cudnn attention refuses fp32, naming the dtype and the kernel that runs it") {
  const std::string m = key_refusal(gpt2_shape(), DType::f32);
  CHECK_THAT(m, Contains("attention: AttentionKernel::cudnn needs bf16 or f16") &&
                    Contains("dtype f32") && Contains("AttentionKernel::simt"));
  CHECK_NOTHROW(key_of(gpt2_shape(), DType::f16));
  // check_attention_kernel (the executor's start-up check) says the same.
  CHECK_THAT(message_of<std::invalid_argument>([] {
               check_attention_kernel("attention", AttentionKernel::cudnn, DType::f32, 64);
             }),
             Contains("needs bf16 or f16"));
  CHECK_NOTHROW(check_attention_kernel("attention", AttentionKernel::cudnn, DType::bf16, 64));
}

TEST_CASE("cudnn attention takes head_dim a multiple of 8 up to 256") {
  for (int64_t d : {8, 64, 72, 128, 256}) {
    AttentionShape s = gpt2_shape();
    s.n_head = s.n_kv_head = 1;
    s.head_dim = d;
    INFO("head_dim " << d);
    CHECK_NOTHROW(key_of(s, DType::bf16, CudnnDirection::forward, false, d, d));
  }
  AttentionShape s = gpt2_shape();
  s.n_head = s.n_kv_head = 1;
  s.head_dim = 60;
  CHECK_THAT(key_refusal(s, DType::bf16, 64, 64), Contains("multiple of 8, got head_dim = 60"));
  s.head_dim = 264;
  CHECK_THAT(key_refusal(s, DType::bf16, 264, 264),
             Contains("head_dim <= 256, got head_dim = 264"));
  CHECK_THAT(message_of<std::invalid_argument>([] {
               check_attention_kernel("attention", AttentionKernel::cudnn, DType::bf16, 36);
             }),
             Contains("got head_dim = 36"));
}

TEST_CASE("cudnn attention refuses partial rotary, softcap, a bad theta and a negative window") {
  AttentionShape s = gpt2_shape();
  s.rope = true;
  CHECK(key_of(s).rope);  // whole-head RoPE: q and k rotated into scratch first
  s.rotary_dim = 64;      // = head_dim: the whole head, accepted
  CHECK_NOTHROW(key_of(s));
  s.rotary_dim = 32;
  CHECK_THAT(key_refusal(s), Contains("partial rotary (rotary_dim = 32, head_dim = 64)"));
  s = gpt2_shape();
  s.rope = true;
  s.rope_theta = 0.0;
  CHECK_THAT(key_refusal(s), Contains("rope_theta > 0"));
  s = gpt2_shape();
  s.softcap = 50.0;
  CHECK_THAT(key_refusal(s), Contains("has no softcap (softcap = 50"));
  s = gpt2_shape();
  s.sliding_window = -1;
  CHECK_THAT(key_refusal(s), Contains("sliding_window >= 0, got sliding_window = -1"));
  s.sliding_window = 4;
  CHECK(key_of(s).sliding_window == 4);  // cuDNN's diagonal band: supported
}

TEST_CASE("cudnn attention refuses rows that are not 16-byte aligned, naming the stride") {
  AttentionShape s = gpt2_shape();
  s.n_head = s.n_kv_head = 1;
  s.head_dim = 8;
  // 12 bf16 elements = 24 bytes between rows.
  CHECK_THAT(key_refusal(s, DType::bf16, 12, 8),
             Contains("q_stride 12 x 2 bytes is not a multiple of 16"));
  CHECK_THAT(key_refusal(s, DType::f16, 8, 20),
             Contains("kv_stride 20 x 2 bytes is not a multiple of 16"));
  CHECK_THAT(key_refusal(s, DType::bf16, 4, 8), Contains("q_stride >= n_head * head_dim"));
  CHECK_NOTHROW(key_of(s, DType::bf16, CudnnDirection::forward, false, 24, 16));
}

TEST_CASE("cudnn attention refuses pointers that are not 16-byte aligned, naming them") {
  alignas(16) static char storage[64];
  CHECK_NOTHROW(require_cudnn_aligned("attention_forward_cudnn", "q", storage + 32));
  CHECK_THAT(message_of<std::invalid_argument>(
                 [] { require_cudnn_aligned("attention_forward_cudnn", "k", storage + 8); }),
             Contains("attention_forward_cudnn") && Contains("16-byte aligned pointers: k") &&
                 Contains("is 8 bytes past a 16-byte boundary"));

  // The op itself: a packed qkv whose base is 2 bytes off refuses before it
  // looks for a graph or touches CUDA (no graph is prepared, no handle exists).
  CudnnAttention att;
  const AttentionShape s = gpt2_shape();
  const DevPtr base{storage + 2, DType::bf16};
  const DevQkv qkv{base, base.at(768), base.at(2 * 768), 3 * 768, 3 * 768};
  float* lse = reinterpret_cast<float*>(storage + 16);
  CHECK_THAT(message_of<std::invalid_argument>([&] {
               att.forward(nullptr, s, qkv, DevPtr{storage, DType::bf16}, lse, Workspace{});
             }),
             Contains("attention_forward_cudnn") && Contains("aligned pointers: q"));
}

TEST_CASE("cudnn attention never builds a graph in a step: an unprepared key is an error") {
  alignas(16) static char storage[64];
  CudnnAttention att;
  const AttentionShape s = gpt2_shape();
  const DevPtr base{storage, DType::bf16};  // 768 * 2 bytes apart: aligned
  const DevQkv qkv{base, base.at(768), base.at(2 * 768), 3 * 768, 3 * 768};
  const std::string m = message_of<std::logic_error>(
      [&] { att.forward(nullptr, s, qkv, base, reinterpret_cast<float*>(storage), Workspace{}); });
  CHECK_THAT(m, Contains("no cuDNN graph was prepared for forward bf16 B=2 T=17 H=12") &&
                    Contains("start-up sizing pass"));
  CHECK(att.cached_graphs() == 0);
}

TEST_CASE("the graph-cache key separates what changes a graph and nothing else") {
  const AttentionShape s = gpt2_shape();
  const CudnnAttentionKey fwd = key_of(s);
  CHECK(fwd == key_of(s));
  CHECK_FALSE(fwd < key_of(s));
  // Deterministic is a backward property: forward keys ignore it.
  CHECK(key_of(s, DType::bf16, CudnnDirection::forward, true) == fwd);
  CHECK_FALSE(key_of(s, DType::bf16, CudnnDirection::forward, true).deterministic);
  const CudnnAttentionKey bwd = key_of(s, DType::bf16, CudnnDirection::backward);
  const CudnnAttentionKey bwd_det = key_of(s, DType::bf16, CudnnDirection::backward, true);
  AttentionShape windowed = s;
  windowed.sliding_window = 5;
  AttentionShape longer = s;
  longer.seq = 18;
  AttentionShape gqa = s;
  gqa.n_kv_head = 4;
  AttentionShape roped = s;
  roped.rope = true;
  const std::vector<CudnnAttentionKey> distinct = {
      fwd,
      bwd,
      bwd_det,
      key_of(s, DType::f16),
      key_of(windowed),
      key_of(longer),
      key_of(gqa, DType::bf16, CudnnDirection::forward, false, 768, 256),
      key_of(s, DType::bf16, CudnnDirection::forward, false, 768, 3 * 768),
      key_of(roped),
  };
  for (size_t i = 0; i < distinct.size(); ++i)
    for (size_t j = 0; j < distinct.size(); ++j) {
      INFO(cudnn_attention_key_text(distinct[i])
           << " vs " << cudnn_attention_key_text(distinct[j]));
      CHECK((distinct[i] == distinct[j]) == (i == j));
      // A strict weak order: exactly one of <, >, == holds.
      const int relations =
          (distinct[i] < distinct[j]) + (distinct[j] < distinct[i]) + (distinct[i] == distinct[j]);
      CHECK(relations == 1);
    }
  // A window of T or more masks nothing beyond causality: the causal graph.
  AttentionShape wide = s;
  wide.sliding_window = 17;
  CHECK(key_of(wide) == fwd);
  CHECK(cudnn_attention_key_text(bwd_det) ==
        "backward bf16 B=2 T=17 H=12 Hkv=12 D=64 q_stride=2304 kv_stride=2304 window=0 rope=0 "
        "scale=0.125 deterministic=1");
  // theta is the call's, not the graph's: one key for every theta.
  AttentionShape other_theta = roped;
  other_theta.rope_theta = 500000.0;
  CHECK(key_of(other_theta) == key_of(roped));
}

TEST_CASE("cudnn attention's backward scratch and strides, by hand") {
  AttentionShape s = gpt2_shape();
  s.n_head = 4;
  s.n_kv_head = 2;
  const CudnnAttentionKey k =
      key_of(s, DType::bf16, CudnnDirection::backward, false, 4 * 64, 2 * 64);
  // dq: 34 rows x 256 x 2 B = 17408 (68 x 256); dk, dv: 34 x 128 x 2 = 8704 (34 x 256) each.
  CHECK(cudnn_backward_scratch_bytes(k) == 17408 + 2 * 8704);
  s.seq = 1;
  s.batch = 1;
  // 1 x 256 x 2 = 512; 1 x 128 x 2 = 256: already 256-aligned. Then odd sizes round up.
  CHECK(cudnn_backward_scratch_bytes(
            key_of(s, DType::bf16, CudnnDirection::backward, false, 256, 128)) == 512 + 2 * 256);
  s.n_head = 3;
  s.n_kv_head = 1;
  s.head_dim = 8;
  // dq 3 x 8 x 2 = 48 -> 256; dk, dv 16 -> 256 each.
  CHECK(cudnn_backward_scratch_bytes(
            key_of(s, DType::f16, CudnnDirection::backward, false, 24, 8)) == 3 * 256);

  // RoPE: the rotated q [34, 256] and k [34, 128] in bf16, 17408 + 8704 bytes;
  // cuDNN then reads them dense, v with the call's stride.
  s = gpt2_shape();
  s.n_head = 4;
  s.n_kv_head = 2;
  s.rope = true;
  const CudnnAttentionKey roped =
      key_of(s, DType::bf16, CudnnDirection::forward, false, 3 * 256, 3 * 256);
  CHECK(cudnn_rope_scratch_bytes(roped) == 17408 + 8704);
  CHECK(cudnn_rope_scratch_bytes(key_of(gpt2_shape())) == 0);
  const CudnnRowStrides rs = cudnn_row_strides(roped);
  CHECK((rs.q == 256 && rs.k == 128 && rs.v == 768));
  const CudnnRowStrides plain = cudnn_row_strides(key_of(gpt2_shape()));
  CHECK((plain.q == 2304 && plain.k == 2304 && plain.v == 2304));

  using cudnn_layout::bhtd_strides;
  using cudnn_layout::stats_strides;
  using cudnn_layout::strided_row_offset;
  // Packed GPT-2 rows: [B, T, 2304] seen as [B, H, T, 64].
  CHECK(bhtd_strides(17, 64, 2304) == std::array<int64_t, 4>{17 * 2304, 64, 2304, 1});
  CHECK(stats_strides(12, 17) == std::array<int64_t, 4>{204, 17, 1, 1});
  // Dense [rows, 4] element 5 = (row 1, column 1) -> 1 * 12 + 1 in rows of 12.
  CHECK(strided_row_offset(5, 4, 12) == 13);
  CHECK(strided_row_offset(3, 4, 12) == 3);
  CHECK(strided_row_offset(8, 4, 4) == 8);  // dense into dense: identity
}

TEST_CASE("RoPE math of the cuDNN path by hand: a rotation and its transpose") {
  using cudnn_layout::rope_rotate;
  using cudnn_layout::rope_rotate_back;
  const float c = std::cos(0.5f), s = std::sin(0.5f);
  float y1 = 0, y2 = 0;
  rope_rotate(1.0f, 0.0f, c, s, &y1, &y2);  // (1, 0) by 0.5 rad
  CHECK(y1 == Approx(c));
  CHECK(y2 == Approx(s));
  rope_rotate(0.0f, 1.0f, c, s, &y1, &y2);  // (0, 1) by 0.5 rad
  CHECK(y1 == Approx(-s));
  CHECK(y2 == Approx(c));
  float z1 = 0, z2 = 0;
  rope_rotate(0.3f, -0.7f, c, s, &y1, &y2);
  rope_rotate_back(y1, y2, c, s, &z1, &z2);
  CHECK(z1 == Approx(0.3f).margin(1e-6));
  CHECK(z2 == Approx(-0.7f).margin(1e-6));
  const cudnn_layout::RopeTable t = cudnn_layout::rope_table(10000.0, 64);
  CHECK(t.inv_freq[0] == 1.0f);
  CHECK(t.inv_freq[1] == static_cast<float>(1.0 / std::pow(10000.0, 2.0 / 64.0)));
  CHECK(t.inv_freq[31] == static_cast<float>(1.0 / std::pow(10000.0, 62.0 / 64.0)));
  CHECK(t.inv_freq[32] == 0.0f);  // past D/2: unused
}

// The decomposition the cuDNN path runs, checked on the CPU twin: attention
// with RoPE equals attention without it on q, k rotated by rope_rotate and
// rope_table (forward), and the backward's dq, dk equal R^T of the unroped
// backward's (rope_rotate_back), dv unchanged.
TEST_CASE("RoPE outside the attention equals cpu::attention's own RoPE, forward and backward") {
  AttentionShape s;
  s.batch = 2;
  s.seq = 9;
  s.n_head = 4;
  s.n_kv_head = 2;
  s.head_dim = 16;
  s.scale = 0.25;
  s.rope_theta = 10000.0;
  const int64_t rows = s.batch * s.seq, qw = s.n_head * s.head_dim, kw = s.n_kv_head * s.head_dim;
  std::vector<float> q(static_cast<size_t>(rows * qw)), k(static_cast<size_t>(rows * kw)),
      v(k.size()), dout(q.size());
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 16777216.0f - 0.5f;  // [-0.5, 0.5)
  };
  for (auto* x : {&q, &k, &v, &dout})
    for (float& e : *x) e = next();
  const cudnn_layout::RopeTable table = cudnn_layout::rope_table(s.rope_theta, s.head_dim);
  const int64_t half = s.head_dim / 2;
  // Rotates (back = false) or rotates back (back = true) every head of rows x width.
  auto rotate = [&](const std::vector<float>& x, int64_t width, bool back) {
    std::vector<float> y(x.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < width / s.head_dim; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const float angle = static_cast<float>(r % s.seq) * table.inv_freq[i];
          const float c = std::cos(angle), sn = std::sin(angle);
          const size_t a = static_cast<size_t>(r * width + h * s.head_dim + i);
          const size_t b = a + static_cast<size_t>(half);
          if (back)
            cudnn_layout::rope_rotate_back(x[a], x[b], c, sn, &y[a], &y[b]);
          else
            cudnn_layout::rope_rotate(x[a], x[b], c, sn, &y[a], &y[b]);
        }
    return y;
  };
  const std::vector<float> qr = rotate(q, qw, false), kr = rotate(k, kw, false);
  std::vector<float> out_rope(q.size()), lse_rope(static_cast<size_t>(rows * s.n_head));
  std::vector<float> out_pre(q.size()), lse_pre(lse_rope.size());
  AttentionShape roped = s;
  roped.rope = true;
  cpu::attention_forward(roped, {q.data(), k.data(), v.data(), qw, kw}, out_rope.data(),
                         lse_rope.data());
  cpu::attention_forward(s, {qr.data(), kr.data(), v.data(), qw, kw}, out_pre.data(),
                         lse_pre.data());
  for (size_t i = 0; i < out_rope.size(); ++i)
    REQUIRE(out_pre[i] == Approx(out_rope[i]).margin(1e-5));
  for (size_t i = 0; i < lse_rope.size(); ++i)
    REQUIRE(lse_pre[i] == Approx(lse_rope[i]).margin(1e-5));

  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  cpu::attention_backward(roped, {q.data(), k.data(), v.data(), qw, kw}, out_rope.data(),
                          lse_rope.data(), dout.data(), {dq.data(), dk.data(), dv.data(), qw, kw});
  std::vector<float> dqr(q.size()), dkr(k.size()), dvr(v.size());
  cpu::attention_backward(s, {qr.data(), kr.data(), v.data(), qw, kw}, out_rope.data(),
                          lse_rope.data(), dout.data(),
                          {dqr.data(), dkr.data(), dvr.data(), qw, kw});
  const std::vector<float> dq_back = rotate(dqr, qw, true), dk_back = rotate(dkr, kw, true);
  for (size_t i = 0; i < dq.size(); ++i) REQUIRE(dq_back[i] == Approx(dq[i]).margin(1e-5));
  for (size_t i = 0; i < dk.size(); ++i) REQUIRE(dk_back[i] == Approx(dk[i]).margin(1e-5));
  for (size_t i = 0; i < dv.size(); ++i) REQUIRE(dvr[i] == Approx(dv[i]).margin(1e-5));
}

TEST_CASE("attention_forward and attention_backward refuse AttentionKernel::cudnn") {
  alignas(16) static char storage[64];
  const AttentionShape s = gpt2_shape();
  const DevPtr p{storage, DType::bf16};
  const DevQkv qkv{p, p, p, 3 * 768, 3 * 768};
  float* lse = reinterpret_cast<float*>(storage);
  CHECK_THAT(message_of<std::invalid_argument>(
                 [&] { attention_forward(nullptr, s, qkv, p, lse, AttentionKernel::cudnn); }),
             Contains("attention_forward") && Contains("CudnnAttention"));
  const DevQkvGrad grad{p, p, p, 3 * 768, 3 * 768};
  CHECK_THAT(message_of<std::invalid_argument>([&] {
               attention_backward(nullptr, s, qkv, p, lse, p, grad, Workspace{},
                                  AttentionKernel::cudnn);
             }),
             Contains("attention_backward") && Contains("CudnnAttention"));
  CHECK(std::string(attention_kernel_name(AttentionKernel::cudnn)) == "cudnn");
}

TEST_CASE("libcudnn loads without a driver and reports cuDNN 9") {
  // The GPU machine's cuDNN comes with PyTorch's wheels; here the toolkit's.
  CHECK_THAT(cudnn_version_text(), Catch::Matchers::StartsWith("9."));
}

}  // namespace
}  // namespace shardscope::engine::cuda
