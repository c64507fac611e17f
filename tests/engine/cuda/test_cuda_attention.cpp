// Fused CUDA attention (engine/cuda/ops/attention_*.cu) against
// cpu::attention_forward / attention_backward on fresh seeded random inputs
// (never zeros): out and lse, then dq/dk/dv accumulated into random prefilled
// gradients. f32 within 1e-5 + 1e-4 |ref| (only summation order, expf and
// sincosf ulps differ); bf16/f16 inputs are rounded on the CPU side first, so
// the remaining difference is the rounding of the stored results (2^-9
// relative for bf16): 1e-2 + 2e-2 |ref|. Layouts: packed GPT-2 qkv
// [B, T, 3*H*D] without RoPE and separate q/k/v with GQA and RoPE.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/cpu/ops.h"
#include "engine/cpu/optim.h"
#include "engine/cuda/ops/ops.h"

namespace shardscope::engine::cuda {
namespace {

using plan::DType;
using FVec = std::vector<float>;

#define CUDA_REQUIRE(expr) REQUIRE((expr) == cudaSuccess)

// Device allocation that frees itself.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { CUDA_REQUIRE(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes)); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

// Values of magnitude in [0.1, 1) with a random sign: never zero.
FVec random_values(std::mt19937_64& rng, int64_t n) {
  std::uniform_real_distribution<float> magnitude(0.1f, 1.0f);
  std::bernoulli_distribution negative(0.5);
  FVec x(static_cast<size_t>(n));
  for (float& v : x) v = negative(rng) ? -magnitude(rng) : magnitude(rng);
  return x;
}

// What storing in `dt` and reading back gives (the CPU side of a 16-bit test).
void round_to(DType dt, FVec& x) {
  if (dt == DType::bf16) cpu::round_inplace_bf16(x.data(), static_cast<int64_t>(x.size()));
  if (dt == DType::f16) cpu::round_inplace_fp16(x.data(), static_cast<int64_t>(x.size()));
}

// Host floats -> a new device array of dtype dt (values already representable).
struct DeviceArray {
  DType dt;
  int64_t n;
  DeviceBuffer buf;
  DeviceArray(const FVec& x, DType d)
      : dt(d),
        n(static_cast<int64_t>(x.size())),
        buf(x.size() * static_cast<size_t>(plan::dtype_bytes(d))) {
    upload(x);
  }
  void upload(const FVec& x) {
    std::vector<unsigned char> bytes(x.size() * static_cast<size_t>(plan::dtype_bytes(dt)));
    for (size_t i = 0; i < x.size(); ++i) {
      if (dt == DType::f32) {
        std::memcpy(bytes.data() + 4 * i, &x[i], 4);
      } else if (dt == DType::bf16) {
        const __nv_bfloat16 h = __float2bfloat16_rn(x[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      } else {
        const __half h = __float2half_rn(x[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    }
    CUDA_REQUIRE(cudaMemcpy(buf.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  }
  FVec download() const {
    std::vector<unsigned char> bytes(static_cast<size_t>(n * plan::dtype_bytes(dt)));
    CUDA_REQUIRE(cudaMemcpy(bytes.data(), buf.get(), bytes.size(), cudaMemcpyDeviceToHost));
    FVec x(static_cast<size_t>(n));
    for (size_t i = 0; i < x.size(); ++i) {
      if (dt == DType::f32) {
        std::memcpy(&x[i], bytes.data() + 4 * i, 4);
      } else if (dt == DType::bf16) {
        __nv_bfloat16 h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        x[i] = __bfloat162float(h);
      } else {
        __half h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        x[i] = __half2float(h);
      }
    }
    return x;
  }
  DevPtr ptr(int64_t offset = 0) const { return DevPtr{buf.get(), dt}.at(offset); }
};

FVec download_f32(const DeviceBuffer& buf, int64_t n) {
  FVec x(static_cast<size_t>(n));
  CUDA_REQUIRE(cudaMemcpy(x.data(), buf.get(), x.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return x;
}

// Every element within atol + rtol |ref|; reports the worst few.
void require_close(const char* what, const FVec& got, const FVec& ref, double atol, double rtol) {
  REQUIRE(got.size() == ref.size());
  int64_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= atol + rtol * std::fabs(ref[i]))) {
      if (bad < 5) first << "  [" << i << "] got " << got[i] << " ref " << ref[i] << "\n";
      ++bad;
    }
  }
  INFO(what << ": " << bad << " of " << ref.size() << " outside tolerance\n" << first.str());
  REQUIRE(bad == 0);
}

struct Case {
  int64_t batch = 2, seq = 1, n_head = 1, n_kv_head = 1, head_dim = 8;
  bool rope = false;
  bool packed = false;  // GPT-2 c_attn output [B, T, 3*H*D] (needs n_head == n_kv_head)
  DType dt = DType::f32;
  double scale = 0.0;  // 0: 1 / sqrt(head_dim)
  uint64_t seed = 1;
};

std::string describe(const Case& c) {
  std::ostringstream o;
  o << "B=" << c.batch << " T=" << c.seq << " H=" << c.n_head << " Hkv=" << c.n_kv_head
    << " D=" << c.head_dim << " rope=" << c.rope << " packed=" << c.packed
    << " dtype=" << plan::dtype_name(c.dt);
  return o.str();
}

// Runs forward and backward on the GPU and on the CPU and compares them.
void check_case(const Case& c) {
  INFO(describe(c));
  const bool f32 = c.dt == DType::f32;
  const double atol = f32 ? 1e-5 : 1e-2, rtol = f32 ? 1e-4 : 2e-2;
  cpu::AttentionShape s;
  s.batch = c.batch;
  s.seq = c.seq;
  s.n_head = c.n_head;
  s.n_kv_head = c.n_kv_head;
  s.head_dim = c.head_dim;
  s.scale = c.scale != 0.0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  s.rope = c.rope;
  s.rope_theta = 10000.0;
  const int64_t rows = c.batch * c.seq, hd = c.n_head * c.head_dim, kvd = c.n_kv_head * c.head_dim;
  const int64_t q_stride = c.packed ? 3 * hd : hd, kv_stride = c.packed ? 3 * hd : kvd;
  const int64_t k_offset = c.packed ? hd : 0, v_offset = c.packed ? 2 * hd : 0;

  std::mt19937_64 rng(c.seed);
  // Packed: q holds the whole [rows, 3*hd] buffer and k, v stay empty.
  FVec q = random_values(rng, rows * q_stride);
  FVec k = c.packed ? FVec() : random_values(rng, rows * kvd);
  FVec v = c.packed ? FVec() : random_values(rng, rows * kvd);
  FVec dout = random_values(rng, rows * hd);
  FVec dq0 = random_values(rng, static_cast<int64_t>(q.size()));  // prefilled gradients
  FVec dk0 = random_values(rng, static_cast<int64_t>(k.size()));
  FVec dv0 = random_values(rng, static_cast<int64_t>(v.size()));
  for (FVec* x : {&q, &k, &v, &dout, &dq0, &dk0, &dv0}) round_to(c.dt, *x);
  const float* kbase = c.packed ? q.data() : k.data();
  const float* vbase = c.packed ? q.data() : v.data();
  const cpu::QkvView view{q.data(), kbase + k_offset, vbase + v_offset, q_stride, kv_stride};

  // ---- forward ----
  FVec out_ref(static_cast<size_t>(rows * hd)), lse_ref(static_cast<size_t>(rows * c.n_head));
  cpu::attention_forward(s, view, out_ref.data(), lse_ref.data());

  cudaStream_t stream = nullptr;
  CUDA_REQUIRE(cudaStreamCreate(&stream));
  const DeviceArray q_dev(q, c.dt);
  const DeviceArray k_dev(c.packed ? FVec{0.5f} : k, c.dt);
  const DeviceArray v_dev(c.packed ? FVec{0.5f} : v, c.dt);
  const DeviceArray& k_src = c.packed ? q_dev : k_dev;
  const DeviceArray& v_src = c.packed ? q_dev : v_dev;
  const DevQkv qkv{q_dev.ptr(), k_src.ptr(k_offset), v_src.ptr(v_offset), q_stride, kv_stride};
  DeviceArray out_dev(FVec(out_ref.size(), 0.25f), c.dt);
  DeviceBuffer lse_dev(lse_ref.size() * sizeof(float));
  attention_forward(stream, s, qkv, out_dev.ptr(), static_cast<float*>(lse_dev.get()));
  CUDA_REQUIRE(cudaStreamSynchronize(stream));
  require_close("out", out_dev.download(), out_ref, atol, rtol);
  require_close("lse", download_f32(lse_dev, rows * c.n_head), lse_ref, 1e-5, 1e-4);

  // ---- backward: both sides read the same out (as stored in dt) and lse ----
  FVec out_used = out_ref;
  round_to(c.dt, out_used);
  FVec dq_ref = dq0, dk_ref = dk0, dv_ref = dv0;
  {
    float* dk_base = c.packed ? dq_ref.data() : dk_ref.data();
    float* dv_base = c.packed ? dq_ref.data() : dv_ref.data();
    cpu::attention_backward(
        s, view, out_used.data(), lse_ref.data(), dout.data(),
        {dq_ref.data(), dk_base + k_offset, dv_base + v_offset, q_stride, kv_stride});
  }
  const DeviceArray out_used_dev(out_used, c.dt);
  const DeviceArray dout_dev(dout, c.dt);
  DeviceBuffer lse_ref_dev(lse_ref.size() * sizeof(float));
  CUDA_REQUIRE(cudaMemcpy(lse_ref_dev.get(), lse_ref.data(), lse_ref.size() * sizeof(float),
                          cudaMemcpyHostToDevice));
  DeviceArray dq_dev(dq0, c.dt);
  DeviceArray dk_dev(c.packed ? FVec{0.5f} : dk0, c.dt);
  DeviceArray dv_dev(c.packed ? FVec{0.5f} : dv0, c.dt);
  const DeviceArray& dk_dst = c.packed ? dq_dev : dk_dev;
  const DeviceArray& dv_dst = c.packed ? dq_dev : dv_dev;
  const DevQkvGrad grad{dq_dev.ptr(0), dk_dst.ptr(k_offset), dv_dst.ptr(v_offset), q_stride,
                        kv_stride};
  const size_t ws_bytes = attention_backward_workspace_bytes(s);
  DeviceBuffer ws(ws_bytes);
  attention_backward(stream, s, qkv, out_used_dev.ptr(),
                     static_cast<const float*>(lse_ref_dev.get()), dout_dev.ptr(), grad,
                     Workspace{ws.get(), ws_bytes});
  CUDA_REQUIRE(cudaStreamSynchronize(stream));
  CUDA_REQUIRE(cudaStreamDestroy(stream));
  require_close("dq", dq_dev.download(), dq_ref, atol, rtol);  // packed: dq, dk and dv
  if (!c.packed) {
    require_close("dk", dk_dev.download(), dk_ref, atol, rtol);
    require_close("dv", dv_dev.download(), dv_ref, atol, rtol);
  }
}

// T and D sweep of the two layouts at one dtype: packed GPT-2 (H = Hkv = 3, no
// rope) and separate tensors with GQA (H = 4, Hkv = 2) and RoPE.
void sweep(DType dt, uint64_t seed) {
  for (int64_t seq : {1, 17, 64, 130}) {
    for (int64_t head_dim : {8, 64, 128}) {
      Case packed;
      packed.seq = seq;
      packed.n_head = packed.n_kv_head = 3;
      packed.head_dim = head_dim;
      packed.packed = true;
      packed.dt = dt;
      packed.seed = seed++;
      check_case(packed);

      Case gqa;
      gqa.seq = seq;
      gqa.n_head = 4;
      gqa.n_kv_head = 2;
      gqa.head_dim = head_dim;
      gqa.rope = true;
      gqa.dt = dt;
      gqa.seed = seed++;
      check_case(gqa);
    }
  }
}

TEST_CASE("attention f32 matches cpu attention (packed GPT-2 and GQA with RoPE, T and D sweep)") {
  sweep(DType::f32, 100);
}

TEST_CASE("attention bf16 matches cpu attention on bf16-rounded inputs (T and D sweep)") {
  sweep(DType::bf16, 200);
}

TEST_CASE("attention covers every head_dim bucket, odd D, MQA, f16 and a non-default scale") {
  // D = 7 and 40 are padded inside the 32 and 64 buckets; 200 and 256 use the
  // 256 bucket (smaller query tiles); Hkv = 1 is multi-query attention.
  for (int64_t head_dim : {7, 40, 200, 256}) {
    Case c;
    c.seq = 70;
    c.n_head = 4;
    c.n_kv_head = 1;
    c.head_dim = head_dim;
    c.rope = head_dim % 2 == 0;
    c.scale = 0.3;
    c.seed = 300 + static_cast<uint64_t>(head_dim);
    check_case(c);
  }
  Case f16;
  f16.seq = 97;
  f16.n_head = 6;
  f16.n_kv_head = 2;
  f16.head_dim = 64;
  f16.rope = true;
  f16.dt = DType::f16;
  f16.seed = 400;
  check_case(f16);
}

TEST_CASE("attention T=4096 bf16 runs in O(T*D) workspace and matches the cpu") {
  Case c;
  c.batch = 1;
  c.seq = 4096;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.head_dim = 64;
  c.rope = true;
  c.dt = DType::bf16;
  c.seed = 500;
  // Workspace: fp32 dq accumulator [B, T, H, D] and delta [B, H, T], each
  // rounded up to 256 bytes; one T x T fp32 score matrix per head would be 63x larger.
  cpu::AttentionShape s;
  s.batch = c.batch;
  s.seq = c.seq;
  s.n_head = c.n_head;
  s.n_kv_head = c.n_kv_head;
  s.head_dim = c.head_dim;
  s.rope = true;
  const size_t closed_form = 4u * 1 * 4096 * 2 * 64 + 4u * 1 * 2 * 4096;
  REQUIRE(attention_backward_workspace_bytes(s) == closed_form);
  REQUIRE(attention_backward_workspace_bytes(s) * 32 <= size_t{4} * 2 * 4096 * 4096);
  check_case(c);
}

}  // namespace
}  // namespace shardscope::engine::cuda
