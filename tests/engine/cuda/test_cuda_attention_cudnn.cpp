// cuDNN fused attention (AttentionKernel::cudnn, engine/cuda/ops/attention_cudnn.h)
// against cpu::attention_forward / attention_backward on seeded random inputs
// rounded to the dtype (never zeros), with the tensor-core family's
// tolerances (test_cuda_attention.cpp: cuDNN also rounds P and dS to 16 bits
// before their products): out and the gradients within 1e-2 + 2e-2 |ref|, lse
// within 1e-2 + 2e-3 |ref|. The gradients are accumulated into random
// prefilled buffers (the engine's += contract), from the CPU's out and lse
// and again from the GPU forward's own (chained, as a training step runs
// them). Layouts: packed GPT-2 qkv [B, T, 3*H*D]; separate q/k/v with grouped
// KV heads; RoPE (Llama: q and k rotated into 16-bit scratch first, as the
// tensor-core kernels round their roped tiles); a sliding window. The deterministic backward gives
// bitwise equal gradients in two runs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/attention_cudnn.h"
#include "engine/cuda/ops/ops.h"
#include "tests/engine/cuda/cuda_ops_test_util.h"

namespace shardscope::engine::cuda {
namespace {

using namespace test;  // NOLINT: the test helpers

struct Case {
  int64_t batch = 2, seq = 67, n_head = 4, n_kv_head = 4, head_dim = 64;
  bool packed = false;  // GPT-2 c_attn output [B, T, 3*H*D] (n_head == n_kv_head)
  DType dt = DType::bf16;
  int64_t window = 0;
  bool rope = false;  // q, k rotated into scratch before cuDNN (Llama)
  uint32_t seed = 1;
};

std::string describe(const Case& c) {
  std::ostringstream o;
  o << "B=" << c.batch << " T=" << c.seq << " H=" << c.n_head << " Hkv=" << c.n_kv_head
    << " D=" << c.head_dim << " packed=" << c.packed << " dtype=" << plan::dtype_name(c.dt)
    << " window=" << c.window << " rope=" << c.rope;
  return o.str();
}

// Inputs of a case and the CPU results on them (packed: q holds the whole
// [rows, 3*H*D] buffer, dq0 the whole gradient; k, v, dk0, dv0 stay empty).
struct Problem {
  cpu::AttentionShape s;
  int64_t rows = 0, hd = 0, q_stride = 0, kv_stride = 0, k_offset = 0, v_offset = 0;
  FVec q, k, v, dout, dq0, dk0, dv0;
  FVec out_ref, lse_ref, out_used;  // out_used: out_ref as stored in dt
  FVec dq_ref, dk_ref, dv_ref;
};

Problem make_problem(const Case& c) {
  Problem pr;
  pr.s.batch = c.batch;
  pr.s.seq = c.seq;
  pr.s.n_head = c.n_head;
  pr.s.n_kv_head = c.n_kv_head;
  pr.s.head_dim = c.head_dim;
  pr.s.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  pr.s.sliding_window = c.window;
  pr.s.rope = c.rope;
  pr.s.rope_theta = 10000.0;
  pr.rows = c.batch * c.seq;
  pr.hd = c.n_head * c.head_dim;
  const int64_t kvd = c.n_kv_head * c.head_dim;
  pr.q_stride = c.packed ? 3 * pr.hd : pr.hd;
  pr.kv_stride = c.packed ? 3 * pr.hd : kvd;
  pr.k_offset = c.packed ? pr.hd : 0;
  pr.v_offset = c.packed ? 2 * pr.hd : 0;
  std::mt19937 rng(c.seed);
  pr.q = random_values(rng, pr.rows * pr.q_stride, c.dt);
  pr.k = c.packed ? FVec() : random_values(rng, pr.rows * kvd, c.dt);
  pr.v = c.packed ? FVec() : random_values(rng, pr.rows * kvd, c.dt);
  pr.dout = random_values(rng, pr.rows * pr.hd, c.dt);
  pr.dq0 = random_values(rng, static_cast<int64_t>(pr.q.size()), c.dt);
  pr.dk0 = random_values(rng, static_cast<int64_t>(pr.k.size()), c.dt);
  pr.dv0 = random_values(rng, static_cast<int64_t>(pr.v.size()), c.dt);
  const float* kbase = c.packed ? pr.q.data() : pr.k.data();
  const float* vbase = c.packed ? pr.q.data() : pr.v.data();
  const cpu::QkvView view{pr.q.data(), kbase + pr.k_offset, vbase + pr.v_offset, pr.q_stride,
                          pr.kv_stride};
  pr.out_ref.resize(static_cast<size_t>(pr.rows * pr.hd));
  pr.lse_ref.resize(static_cast<size_t>(pr.rows * c.n_head));
  cpu::attention_forward(pr.s, view, pr.out_ref.data(), pr.lse_ref.data());
  pr.out_used = rounded(pr.out_ref, c.dt);
  pr.dq_ref = pr.dq0;
  pr.dk_ref = pr.dk0;
  pr.dv_ref = pr.dv0;
  float* dk_base = c.packed ? pr.dq_ref.data() : pr.dk_ref.data();
  float* dv_base = c.packed ? pr.dq_ref.data() : pr.dv_ref.data();
  cpu::attention_backward(
      pr.s, view, pr.out_used.data(), pr.lse_ref.data(), pr.dout.data(),
      {pr.dq_ref.data(), dk_base + pr.k_offset, dv_base + pr.v_offset, pr.q_stride, pr.kv_stride});
  return pr;
}

struct Grads {
  FVec dq, dk, dv;  // packed: dq holds all three
};

// The GPU side of one problem: graphs prepared as the executor's sizing does.
class Gpu {
 public:
  Gpu(const Case& c, const Problem& pr, bool deterministic)
      : c_(c),
        pr_(pr),
        att_(deterministic),
        q_(pr.q, c.dt),
        k_(c.packed ? FVec(8, 0.5f) : pr.k, c.dt),
        v_(c.packed ? FVec(8, 0.5f) : pr.v, c.dt),
        dout_(pr.dout, c.dt) {
    const auto key = [&](CudnnDirection d) {
      return cudnn_attention_key("test", pr.s, c.dt, pr.q_stride, pr.kv_stride, d, deterministic);
    };
    const size_t fwd = att_.prepare(key(CudnnDirection::forward));
    const size_t bwd = att_.prepare(key(CudnnDirection::backward));
    ws_ = DeviceBuffer(std::max<size_t>({fwd, bwd, 1}));
  }
  DevQkv qkv() const {
    const DeviceArray& k = c_.packed ? q_ : k_;
    const DeviceArray& v = c_.packed ? q_ : v_;
    return DevQkv{q_.cptr(), k.ptr().at(pr_.k_offset), v.ptr().at(pr_.v_offset), pr_.q_stride,
                  pr_.kv_stride};
  }
  Workspace ws() const { return Workspace{ws_.get(), ws_.bytes()}; }
  CudnnAttention& att() { return att_; }
  const Stream& stream() const { return stream_; }

  // Backward from (out, lse) on the device into freshly prefilled gradients.
  Grads backward(ConstDevPtr out, const float* lse) {
    DeviceArray dq(pr_.dq0, c_.dt);
    DeviceArray dk(c_.packed ? FVec(8, 0.5f) : pr_.dk0, c_.dt);
    DeviceArray dv(c_.packed ? FVec(8, 0.5f) : pr_.dv0, c_.dt);
    const DeviceArray& dk_dst = c_.packed ? dq : dk;
    const DeviceArray& dv_dst = c_.packed ? dq : dv;
    const DevQkvGrad grad{dq.ptr(), dk_dst.ptr().at(pr_.k_offset), dv_dst.ptr().at(pr_.v_offset),
                          pr_.q_stride, pr_.kv_stride};
    att_.backward(stream_.get(), pr_.s, qkv(), out, lse, dout_.cptr(), grad, ws());
    stream_.sync();
    Grads g;
    g.dq = dq.download();
    if (!c_.packed) {
      g.dk = dk.download();
      g.dv = dv.download();
    }
    return g;
  }

 private:
  const Case& c_;
  const Problem& pr_;
  Stream stream_;
  CudnnAttention att_;
  DeviceArray q_, k_, v_, dout_;
  DeviceBuffer ws_;
};

const Tolerance kTol{1e-2, 2e-2};     // out and gradients (tensor-core family)
const Tolerance kLseTol{1e-2, 2e-3};  // lse

void check_grads(const char* what, const Case& c, const Grads& g, const Problem& pr) {
  check_close(g.dq, pr.dq_ref, kTol, std::string(what) + " dq");  // packed: dq, dk, dv
  if (!c.packed) {
    check_close(g.dk, pr.dk_ref, kTol, std::string(what) + " dk");
    check_close(g.dv, pr.dv_ref, kTol, std::string(what) + " dv");
  }
}

void check_case(const Case& c) {
  INFO(describe(c));
  const Problem pr = make_problem(c);
  Gpu gpu(c, pr, false);
  DeviceArray out(FVec(pr.out_ref.size(), 0.25f), c.dt);
  DeviceVector<float> lse(FVec(pr.lse_ref.size(), -7.0f));
  gpu.att().forward(gpu.stream().get(), pr.s, gpu.qkv(), out.ptr(), lse.get(), gpu.ws());
  gpu.stream().sync();
  check_close(out.download(), pr.out_ref, kTol, "out");
  check_close(lse.download(), pr.lse_ref, kLseTol, "lse");
  const DeviceArray out_used(pr.out_used, c.dt);
  const DeviceVector<float> lse_ref(pr.lse_ref);
  check_grads("from the CPU's out and lse:", c, gpu.backward(out_used.cptr(), lse_ref.get()), pr);
  check_grads("chained:", c, gpu.backward(out.cptr(), lse.get()), pr);
}

TEST_CASE("cuDNN attention: packed GPT-2 qkv, causal, head_dim 64, bf16 and fp16") {
  for (DType dt : {DType::bf16, DType::f16}) {
    Case c;
    c.packed = true;
    c.dt = dt;
    c.seq = 67;  // not a multiple of cuDNN's tiles
    check_case(c);
  }
}

TEST_CASE("cuDNN attention: grouped KV heads, head_dim 128, bf16 and fp16") {
  for (DType dt : {DType::bf16, DType::f16}) {
    Case c;
    c.n_head = 8;
    c.n_kv_head = 2;
    c.head_dim = 128;
    c.seq = 130;
    c.dt = dt;
    c.seed = 7;
    check_case(c);
  }
}

TEST_CASE("cuDNN attention: RoPE with grouped KV heads (Llama), head_dim 64 and 128") {
  for (int64_t d : {64, 128}) {
    Case c;
    c.n_head = 8;
    c.n_kv_head = 2;
    c.head_dim = d;
    c.seq = 100;
    c.rope = true;
    c.seed = 13;
    check_case(c);
  }
  Case packed;  // RoPE on a packed projection: v keeps the packed stride
  packed.packed = true;
  packed.rope = true;
  packed.dt = DType::f16;
  check_case(packed);
}

TEST_CASE("cuDNN attention: a sliding window equals the CPU's t - W < j <= t") {
  Case c;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.seq = 96;
  c.window = 17;
  c.seed = 11;
  check_case(c);
}

TEST_CASE("cuDNN attention: the deterministic backward is bitwise equal across two runs") {
  Case c;
  c.n_head = 8;
  c.n_kv_head = 2;
  c.head_dim = 128;
  c.seq = 256;
  c.batch = 3;
  c.seed = 5;
  const Problem pr = make_problem(c);
  Gpu gpu(c, pr, true);
  const DeviceArray out_used(pr.out_used, c.dt);
  const DeviceVector<float> lse_ref(pr.lse_ref);
  const Grads a = gpu.backward(out_used.cptr(), lse_ref.get());
  const Grads b = gpu.backward(out_used.cptr(), lse_ref.get());
  CHECK(a.dq == b.dq);
  CHECK(a.dk == b.dk);
  CHECK(a.dv == b.dv);
  check_grads("deterministic:", c, a, pr);
}

TEST_CASE("cuDNN attention: prepare builds each key's graph once") {
  Case c;
  const Problem pr = make_problem(c);
  CudnnAttention att;
  const auto key = cudnn_attention_key("test", pr.s, c.dt, pr.q_stride, pr.kv_stride,
                                       CudnnDirection::backward, false);
  const size_t first = att.prepare(key);
  const size_t again = att.prepare(key);
  CHECK(again == first);
  CHECK(att.cached_graphs() == 1);
  // The backward's workspace holds at least its dense dQ, dK, dV scratch.
  CHECK(first >= cudnn_backward_scratch_bytes(key));
  att.prepare(cudnn_attention_key("test", pr.s, c.dt, pr.q_stride, pr.kv_stride,
                                  CudnnDirection::forward, false));
  CHECK(att.cached_graphs() == 2);
}

}  // namespace
}  // namespace shardscope::engine::cuda
