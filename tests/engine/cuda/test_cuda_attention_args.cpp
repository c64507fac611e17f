// Argument checks of the fused CUDA attention and its workspace size, on any
// machine: every check throws std::invalid_argument before the first CUDA call
// (without a device, a CUDA call would fail with CudaError instead), and empty
// shapes return without touching CUDA. The pointers below are never
// dereferenced: each call throws (or returns) before any launch.
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>

#include "engine/cuda/ops/ops.h"

namespace shardscope::engine::cuda {
namespace {

using Catch::Matchers::Contains;
using plan::DType;

// The message of the std::invalid_argument that f throws (any other outcome fails).
template <typename F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("no std::invalid_argument was thrown");
  return {};
}

// A valid GQA + RoPE call on separate tensors (fake, never dereferenced addresses).
struct Call {
  float storage[8] = {};
  AttentionShape shape;
  DevQkv qkv;
  DevPtr out;
  float* lse = storage;
  ConstDevPtr dout;
  DevQkvGrad grad;
  Workspace ws;

  Call() {
    shape.batch = 2;
    shape.seq = 17;
    shape.n_head = 4;
    shape.n_kv_head = 2;
    shape.head_dim = 16;
    shape.scale = 0.25;
    shape.rope = true;
    void* p = storage;
    qkv = DevQkv{DevPtr{p, DType::f32}, DevPtr{p, DType::f32}, DevPtr{p, DType::f32}, 64, 32};
    out = DevPtr{p, DType::f32};
    dout = DevPtr{p, DType::f32};
    grad = DevQkvGrad{DevPtr{p, DType::f32}, DevPtr{p, DType::f32}, DevPtr{p, DType::f32}, 64, 32};
    ws = Workspace{p, attention_backward_workspace_bytes(shape)};
  }
  void forward() const { attention_forward(nullptr, shape, qkv, out, lse); }
  void backward() const { attention_backward(nullptr, shape, qkv, out, lse, dout, grad, ws); }
};

// Both launchers reject `mutate`d calls naming `what`.
template <typename Mutate>
void require_both_reject(Mutate mutate, const std::string& what) {
  Call c;
  mutate(c);
  const std::string fwd = invalid_argument_message([&] { c.forward(); });
  CHECK_THAT(fwd, Contains("attention_forward") && Contains(what));
  const std::string bwd = invalid_argument_message([&] { c.backward(); });
  CHECK_THAT(bwd, Contains("attention_backward") && Contains(what));
}

TEST_CASE("attention rejects bad shapes before any CUDA call, naming the argument") {
  require_both_reject([](Call& c) { c.shape.batch = -1; }, "batch");
  require_both_reject([](Call& c) { c.shape.seq = -3; }, "seq");
  require_both_reject([](Call& c) { c.shape.n_head = 0; }, "n_head");
  require_both_reject([](Call& c) { c.shape.n_kv_head = 0; }, "n_kv_head");
  require_both_reject([](Call& c) { c.shape.head_dim = 0; }, "head_dim");
  require_both_reject([](Call& c) { c.shape.head_dim = 258; }, "head_dim = 258 > 256");
  require_both_reject([](Call& c) { c.shape.n_kv_head = 3; }, "not a multiple of n_kv_head");
  require_both_reject(
      [](Call& c) {
        c.shape.head_dim = 15;
        c.qkv.q_stride = c.grad.q_stride = 60;
        c.qkv.kv_stride = c.grad.kv_stride = 30;
      },
      "rope needs an even head_dim");
  require_both_reject([](Call& c) { c.shape.rope_theta = 0.0; }, "rope_theta");
  require_both_reject([](Call& c) { c.shape.scale = std::numeric_limits<double>::infinity(); },
                      "scale");
  require_both_reject([](Call& c) { c.qkv.q_stride = c.grad.q_stride = 63; }, "q_stride 63");
  require_both_reject([](Call& c) { c.qkv.kv_stride = c.grad.kv_stride = 31; }, "kv_stride 31");
}

TEST_CASE("attention rejects bad window, softcap, rotary_dim and head_stride, naming them") {
  require_both_reject([](Call& c) { c.shape.sliding_window = -1; }, "sliding_window = -1 < 0");
  require_both_reject([](Call& c) { c.shape.softcap = -2.0; }, "softcap must be finite and >= 0");
  require_both_reject([](Call& c) { c.shape.softcap = std::numeric_limits<double>::quiet_NaN(); },
                      "softcap must be finite");
  require_both_reject([](Call& c) { c.shape.rotary_dim = 5; },
                      "rope needs an even rotary_dim, got 5");
  require_both_reject([](Call& c) { c.shape.rotary_dim = 18; },
                      "rotary_dim 18 is not in [0, head_dim 16]");
  require_both_reject([](Call& c) { c.qkv.head_stride = c.grad.head_stride = 8; },
                      "head_stride 8 < head_dim 16");
  // GPT-NeoX's per-head qkv: heads 3*D = 48 apart, so a row needs 3*48 + 16.
  require_both_reject(
      [](Call& c) {
        c.qkv.head_stride = c.grad.head_stride = 48;
        c.qkv.kv_stride = c.grad.kv_stride = 200;
      },
      "q_stride 64 < (n_head - 1) * head_stride + head_dim 160");
  // Accepted: every attribute at once gets past the checks (empty batch: no CUDA).
  Call c;
  c.shape.batch = 0;
  c.shape.sliding_window = 4;
  c.shape.softcap = 50.0;
  c.shape.rotary_dim = 4;
  CHECK_NOTHROW(c.forward());
  CHECK_NOTHROW(c.backward());
}

TEST_CASE("attention rejects null operands and mixed dtypes, naming the operand") {
  require_both_reject([](Call& c) { c.qkv.q.ptr = nullptr; }, "q is null");
  require_both_reject([](Call& c) { c.qkv.k.ptr = nullptr; }, "k is null");
  require_both_reject([](Call& c) { c.qkv.v.ptr = nullptr; }, "v is null");
  require_both_reject([](Call& c) { c.lse = nullptr; }, "lse is null");
  require_both_reject([](Call& c) { c.qkv.k.dt = DType::bf16; }, "k has dtype bf16");
  require_both_reject([](Call& c) { c.qkv.v.dt = DType::f16; }, "v has dtype f16");
  require_both_reject([](Call& c) { c.out.dt = DType::bf16; }, "out has dtype bf16");
  require_both_reject(
      [](Call& c) {
        c.qkv.q.dt = c.qkv.k.dt = c.qkv.v.dt = c.out.dt = c.dout.dt = DType::i64;
        c.grad.dq.dt = c.grad.dk.dt = c.grad.dv.dt = DType::i64;
      },
      "dtype i64");

  Call fwd;
  fwd.out.ptr = nullptr;
  CHECK_THAT(invalid_argument_message([&] { fwd.forward(); }), Contains("out is null"));
}

TEST_CASE("attention_backward rejects bad gradients, strides and workspaces") {
  const auto backward_message = [](auto mutate) {
    Call c;
    mutate(c);
    return invalid_argument_message([&] { c.backward(); });
  };
  CHECK_THAT(backward_message([](Call& c) { c.dout.ptr = nullptr; }), Contains("dout is null"));
  CHECK_THAT(backward_message([](Call& c) { c.out.ptr = nullptr; }), Contains("out is null"));
  CHECK_THAT(backward_message([](Call& c) { c.grad.dq.ptr = nullptr; }), Contains("dq is null"));
  CHECK_THAT(backward_message([](Call& c) { c.grad.dk.ptr = nullptr; }), Contains("dk is null"));
  CHECK_THAT(backward_message([](Call& c) { c.grad.dv.ptr = nullptr; }), Contains("dv is null"));
  CHECK_THAT(backward_message([](Call& c) { c.dout.dt = DType::bf16; }),
             Contains("dout has dtype bf16"));
  CHECK_THAT(backward_message([](Call& c) { c.grad.dk.dt = DType::f16; }),
             Contains("dk has dtype f16"));
  // The gradients may have their own row strides (packed gradients of
  // [B, T, H*D] copies), checked as the inputs' are; heads are spaced alike.
  CHECK_THAT(backward_message([](Call& c) { c.grad.kv_stride = 31; }),
             Contains("grad.kv_stride 31 < (n_kv_head - 1) * head_stride + head_dim 32"));
  CHECK_THAT(backward_message([](Call& c) { c.grad.q_stride = 63; }), Contains("grad.q_stride 63"));
  CHECK_THAT(backward_message([](Call& c) { c.grad.head_stride = 48; }),
             Contains("grad.head_stride 48 differs from the inputs' 0"));
  CHECK_THAT(backward_message([](Call& c) { c.ws.bytes -= 1; }),
             Contains("workspace") && Contains("attention_backward_workspace_bytes"));
  CHECK_THAT(backward_message([](Call& c) { c.ws.ptr = nullptr; }), Contains("workspace"));
}

TEST_CASE("attention with an empty batch or sequence returns without touching CUDA") {
  Call c;
  c.shape.batch = 0;
  c.qkv.q.ptr = c.qkv.k.ptr = c.qkv.v.ptr = c.out.ptr = nullptr;
  c.lse = nullptr;
  c.ws = Workspace{};
  CHECK_NOTHROW(c.forward());
  CHECK_NOTHROW(c.backward());
  c.shape.batch = 2;
  c.shape.seq = 0;
  CHECK_NOTHROW(c.forward());
  CHECK_NOTHROW(c.backward());
  CHECK(attention_backward_workspace_bytes(c.shape) == 0);
}

// The tensor-core kernels take bf16/f16 and head_dim a multiple of 16 up to
// 128; anything else throws (never a silent SIMT fallback), before any CUDA
// call and even for empty shapes.
TEST_CASE("attention tensor_core rejects f32 and head_dims it cannot run, naming the reason") {
  const auto both_reject = [](auto mutate, const std::string& what) {
    Call c;
    mutate(c);
    const std::string fwd = invalid_argument_message([&] {
      attention_forward(nullptr, c.shape, c.qkv, c.out, c.lse, AttentionKernel::tensor_core);
    });
    CHECK_THAT(fwd, Contains("attention_forward") && Contains("tensor_core") && Contains(what));
    const std::string bwd = invalid_argument_message([&] {
      attention_backward(nullptr, c.shape, c.qkv, c.out, c.lse, c.dout, c.grad, c.ws,
                         AttentionKernel::tensor_core);
    });
    CHECK_THAT(bwd, Contains("attention_backward") && Contains("tensor_core") && Contains(what));
  };
  const auto to_16bit = [](Call& c, DType dt) {
    c.qkv.q.dt = c.qkv.k.dt = c.qkv.v.dt = c.out.dt = c.dout.dt = dt;
    c.grad.dq.dt = c.grad.dk.dt = c.grad.dv.dt = dt;
  };
  const auto head_dim = [](Call& c, int64_t d) {
    c.shape.head_dim = d;
    c.qkv.q_stride = c.grad.q_stride = c.shape.n_head * d;
    c.qkv.kv_stride = c.grad.kv_stride = c.shape.n_kv_head * d;
    c.ws.bytes = attention_backward_workspace_bytes(c.shape);
  };
  // The Call's default dtype is f32 (head_dim 16 would be fine).
  both_reject([](Call&) {}, "needs bf16 or f16 tensors, q has dtype f32");
  both_reject(
      [&](Call& c) {
        to_16bit(c, DType::bf16);
        head_dim(c, 40);
      },
      "multiple of 16, got 40");
  both_reject(
      [&](Call& c) {
        to_16bit(c, DType::f16);
        head_dim(c, 192);
      },
      "head_dim <= 128, got head_dim = 192");
  both_reject(
      [&](Call& c) {
        to_16bit(c, DType::bf16);
        head_dim(c, 8);
      },
      "multiple of 16, got 8");
  // Refused even when there is nothing to compute.
  both_reject([](Call& c) { c.shape.seq = 0; }, "q has dtype f32");
  // Shape and operand errors keep their own messages under tensor_core.
  {
    Call c;
    to_16bit(c, DType::bf16);
    c.qkv.k.ptr = nullptr;
    CHECK_THAT(invalid_argument_message([&] {
                 attention_forward(nullptr, c.shape, c.qkv, c.out, c.lse,
                                   AttentionKernel::tensor_core);
               }),
               Contains("k is null"));
  }
  // Accepted combinations get past every check: with an empty batch they
  // return without touching CUDA.
  for (const DType dt : {DType::bf16, DType::f16}) {
    for (const int64_t d : {16, 32, 48, 64, 128}) {
      Call c;
      to_16bit(c, dt);
      head_dim(c, d);
      c.shape.batch = 0;
      CHECK_NOTHROW(
          attention_forward(nullptr, c.shape, c.qkv, c.out, c.lse, AttentionKernel::tensor_core));
      CHECK_NOTHROW(attention_backward(nullptr, c.shape, c.qkv, c.out, c.lse, c.dout, c.grad, c.ws,
                                       AttentionKernel::tensor_core));
    }
  }
}

TEST_CASE(
    "attention backward workspace is fp32 dq [B,T,H,D] plus delta [B,H,T], 256-byte aligned") {
  AttentionShape s;
  s.batch = 1;
  s.seq = 17;
  s.n_head = 3;
  s.n_kv_head = 1;
  s.head_dim = 8;
  // dq: 4 * 17 * 3 * 8 = 1632 -> 1792; delta: 4 * 3 * 17 = 204 -> 256.
  CHECK(attention_backward_workspace_bytes(s) == 1792 + 256);

  // GPT-2 small at T = 4096: linear in T (O(T*D)), not T x T.
  s.batch = 2;
  s.seq = 4096;
  s.n_head = s.n_kv_head = 12;
  s.head_dim = 64;
  const size_t at_4096 = attention_backward_workspace_bytes(s);
  CHECK(at_4096 == size_t{4} * 2 * 4096 * 12 * 64 + size_t{4} * 2 * 12 * 4096);
  s.seq = 8192;
  CHECK(attention_backward_workspace_bytes(s) == 2 * at_4096);
  s.head_dim = 300;
  CHECK_THROWS_AS(attention_backward_workspace_bytes(s), std::invalid_argument);
}

}  // namespace
}  // namespace shardscope::engine::cuda
