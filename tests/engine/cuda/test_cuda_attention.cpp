// Fused CUDA attention (engine/cuda/ops/attention_*.cu) against
// cpu::attention_forward / attention_backward on fresh seeded random inputs
// (never zeros): out and lse, then dq/dk/dv accumulated into random prefilled
// gradients. f32 within 1e-5 + 1e-4 |ref| (only summation order, expf and
// sincosf ulps differ); bf16/f16 inputs are rounded on the CPU side first, so
// the remaining difference is the rounding of the stored results (2^-9
// relative for bf16): 1e-2 + 2e-2 |ref|. Layouts: packed GPT-2 qkv
// [B, T, 3*H*D] without RoPE and separate q/k/v with GQA and RoPE; then the
// attributes of the other dense families, each forward and backward, both
// kernel families: sliding windows (Mistral, Gemma 2, Phi-3), soft-capped
// scores (Gemma 2), partial rotary (GPT-NeoX, Phi), GPT-NeoX's per-head
// [B, T, H, 3, D] qkv, a packed q|k|v with grouped KV heads (Phi-3), and k, v
// read from [B, T, H*D] copies with gradients into a packed buffer (repeat_kv).
//
// AttentionKernel::tensor_core (bf16/f16 only) also rounds its operands to 16
// bits in shared memory (roped, scaled q and roped k; P and dS), so besides
// the stored results its scores differ from the fp32 ones by ~2^-8 |q||k|
// relative rounding terms: out and the gradients keep the 16-bit tolerance,
// lse (exact to 1e-5 on the SIMT path) gets 1e-2 + 2e-3 |ref|.
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
  bool packed = false;  // one [B, T, H*D + 2*Hkv*D] q|k|v buffer (GPT-2's c_attn, Phi-3's qkv_proj)
  bool per_head = false;   // packed per head [B, T, H, 3, D] (GPT-NeoX; n_head == n_kv_head)
  bool copied_kv = false;  // separate q and k, v copies [B, T, H*D]; gradients packed
  int64_t window = 0, rotary_dim = 0;
  double softcap = 0.0;
  DType dt = DType::f32;
  double scale = 0.0;  // 0: 1 / sqrt(head_dim)
  uint64_t seed = 1;
  AttentionKernel kernel = AttentionKernel::simt;
};

std::string describe(const Case& c) {
  std::ostringstream o;
  o << "B=" << c.batch << " T=" << c.seq << " H=" << c.n_head << " Hkv=" << c.n_kv_head
    << " D=" << c.head_dim << " rope=" << c.rope << " packed=" << c.packed
    << " per_head=" << c.per_head << " copied_kv=" << c.copied_kv << " window=" << c.window
    << " softcap=" << c.softcap << " rotary_dim=" << c.rotary_dim
    << " dtype=" << plan::dtype_name(c.dt)
    << " kernel=" << (c.kernel == AttentionKernel::simt ? "simt" : "tensor_core");
  return o.str();
}

cpu::AttentionShape shape_of(const Case& c) {
  cpu::AttentionShape s;
  s.batch = c.batch;
  s.seq = c.seq;
  s.n_head = c.n_head;
  s.n_kv_head = c.n_kv_head;
  s.head_dim = c.head_dim;
  s.scale = c.scale != 0.0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  s.rope = c.rope;
  s.rope_theta = 10000.0;
  s.sliding_window = c.window;
  s.softcap = c.softcap;
  s.rotary_dim = c.rotary_dim;
  return s;
}

// Seeded inputs of a case (rounded to its dtype) and the CPU results on them.
// Packed: q holds the whole [rows, row] buffer (and dq0 the whole gradient)
// and k, v, dk0, dv0 stay empty. copied_kv: q, k, v separate [rows, hd] (k
// and v: H / Hkv copies of their Hkv*D values), the gradients packed
// (dq0 whole, dk0 and dv0 empty).
struct Problem {
  cpu::AttentionShape s;
  int64_t rows = 0, hd = 0, q_stride = 0, kv_stride = 0, k_offset = 0, v_offset = 0;
  int64_t head_stride = 0;
  bool grad_packed = false;
  int64_t dq_stride = 0, dkv_stride = 0, dk_offset = 0, dv_offset = 0;
  FVec q, k, v, dout, dq0, dk0, dv0;
  FVec out_ref, lse_ref;        // cpu forward
  FVec out_used;                // out_ref as stored in dt: the backward's input
  FVec dq_ref, dk_ref, dv_ref;  // cpu backward, accumulated into dq0, dk0, dv0
};

Problem make_problem(const Case& c) {
  Problem pr;
  pr.s = shape_of(c);
  pr.rows = c.batch * c.seq;
  pr.hd = c.n_head * c.head_dim;
  const int64_t kvd = c.n_kv_head * c.head_dim, row = pr.hd + 2 * kvd;
  const int64_t packed_k = c.per_head ? c.head_dim : pr.hd;
  const int64_t packed_v = c.per_head ? 2 * c.head_dim : pr.hd + kvd;
  pr.q_stride = c.packed ? row : pr.hd;
  pr.kv_stride = c.packed ? row : (c.copied_kv ? pr.hd : kvd);
  pr.k_offset = c.packed ? packed_k : 0;
  pr.v_offset = c.packed ? packed_v : 0;
  pr.head_stride = c.per_head ? 3 * c.head_dim : 0;
  pr.grad_packed = c.packed || c.copied_kv;
  pr.dq_stride = pr.grad_packed ? row : pr.hd;
  pr.dkv_stride = pr.grad_packed ? row : kvd;
  pr.dk_offset = pr.grad_packed ? packed_k : 0;
  pr.dv_offset = pr.grad_packed ? packed_v : 0;

  std::mt19937_64 rng(c.seed);
  pr.q = random_values(rng, pr.rows * pr.q_stride);
  pr.k = c.packed ? FVec() : random_values(rng, pr.rows * pr.kv_stride);
  pr.v = c.packed ? FVec() : random_values(rng, pr.rows * pr.kv_stride);
  pr.dout = random_values(rng, pr.rows * pr.hd);
  pr.dq0 = random_values(rng, pr.rows * pr.dq_stride);  // prefilled gradients
  pr.dk0 = pr.grad_packed ? FVec() : random_values(rng, pr.rows * pr.dkv_stride);
  pr.dv0 = pr.grad_packed ? FVec() : random_values(rng, pr.rows * pr.dkv_stride);
  for (FVec* x : {&pr.q, &pr.k, &pr.v, &pr.dout, &pr.dq0, &pr.dk0, &pr.dv0}) round_to(c.dt, *x);
  if (c.copied_kv)  // every copy holds the first Hkv*D values of its row
    for (FVec* x : {&pr.k, &pr.v})
      for (int64_t r = 0; r < pr.rows; ++r)
        for (int64_t col = kvd; col < pr.hd; ++col)
          (*x)[static_cast<size_t>(r * pr.hd + col)] =
              (*x)[static_cast<size_t>(r * pr.hd + col % kvd)];
  const float* kbase = c.packed ? pr.q.data() : pr.k.data();
  const float* vbase = c.packed ? pr.q.data() : pr.v.data();
  const cpu::QkvView view{pr.q.data(), kbase + pr.k_offset, vbase + pr.v_offset,
                          pr.q_stride, pr.kv_stride,        pr.head_stride};

  pr.out_ref.resize(static_cast<size_t>(pr.rows * pr.hd));
  pr.lse_ref.resize(static_cast<size_t>(pr.rows * c.n_head));
  cpu::attention_forward(pr.s, view, pr.out_ref.data(), pr.lse_ref.data());

  // The backward on both sides reads the same out (as stored in dt) and lse.
  pr.out_used = pr.out_ref;
  round_to(c.dt, pr.out_used);
  pr.dq_ref = pr.dq0;
  pr.dk_ref = pr.dk0;
  pr.dv_ref = pr.dv0;
  float* dk_base = pr.grad_packed ? pr.dq_ref.data() : pr.dk_ref.data();
  float* dv_base = pr.grad_packed ? pr.dq_ref.data() : pr.dv_ref.data();
  cpu::attention_backward(pr.s, view, pr.out_used.data(), pr.lse_ref.data(), pr.dout.data(),
                          {pr.dq_ref.data(), dk_base + pr.dk_offset, dv_base + pr.dv_offset,
                           pr.dq_stride, pr.dkv_stride, pr.head_stride});
  return pr;
}

// What the GPU computed for a problem with one kernel family.
struct GpuResult {
  FVec out, lse;    // forward
  FVec dq, dk, dv;  // backward from the problem's out_used and lse_ref
  FVec dq_chained;  // backward from this forward's own out and lse (dq of a fresh dq0)
  FVec dk_chained, dv_chained;
};

// chained: also run the backward from the forward's own results (else the
// *_chained vectors stay empty).
GpuResult run_gpu(const Case& c, const Problem& pr, AttentionKernel kernel, bool chained) {
  GpuResult res;
  cudaStream_t stream = nullptr;
  CUDA_REQUIRE(cudaStreamCreate(&stream));
  const DeviceArray q_dev(pr.q, c.dt);
  const DeviceArray k_dev(c.packed ? FVec{0.5f} : pr.k, c.dt);
  const DeviceArray v_dev(c.packed ? FVec{0.5f} : pr.v, c.dt);
  const DeviceArray& k_src = c.packed ? q_dev : k_dev;
  const DeviceArray& v_src = c.packed ? q_dev : v_dev;
  const DevQkv qkv{q_dev.ptr(), k_src.ptr(pr.k_offset), v_src.ptr(pr.v_offset),
                   pr.q_stride, pr.kv_stride,           pr.head_stride};

  // ---- forward ----
  DeviceArray out_dev(FVec(pr.out_ref.size(), 0.25f), c.dt);
  DeviceBuffer lse_dev(pr.lse_ref.size() * sizeof(float));
  attention_forward(stream, pr.s, qkv, out_dev.ptr(), static_cast<float*>(lse_dev.get()), kernel);
  CUDA_REQUIRE(cudaStreamSynchronize(stream));
  res.out = out_dev.download();
  res.lse = download_f32(lse_dev, static_cast<int64_t>(pr.lse_ref.size()));

  // ---- backward into prefilled gradients, from (out, lse) given on the device ----
  const DeviceArray dout_dev(pr.dout, c.dt);
  const size_t ws_bytes = attention_backward_workspace_bytes(pr.s);
  DeviceBuffer ws(ws_bytes);
  const auto backward = [&](ConstDevPtr out, const float* lse, FVec* dq, FVec* dk, FVec* dv) {
    DeviceArray dq_dev(pr.dq0, c.dt);
    DeviceArray dk_dev(pr.grad_packed ? FVec{0.5f} : pr.dk0, c.dt);
    DeviceArray dv_dev(pr.grad_packed ? FVec{0.5f} : pr.dv0, c.dt);
    const DeviceArray& dk_dst = pr.grad_packed ? dq_dev : dk_dev;
    const DeviceArray& dv_dst = pr.grad_packed ? dq_dev : dv_dev;
    const DevQkvGrad grad{dq_dev.ptr(0),
                          dk_dst.ptr(pr.dk_offset),
                          dv_dst.ptr(pr.dv_offset),
                          pr.dq_stride,
                          pr.dkv_stride,
                          pr.head_stride};
    attention_backward(stream, pr.s, qkv, out, lse, dout_dev.ptr(), grad,
                       Workspace{ws.get(), ws_bytes}, kernel);
    CUDA_REQUIRE(cudaStreamSynchronize(stream));
    *dq = dq_dev.download();  // packed gradients: dq, dk and dv
    if (!pr.grad_packed) {
      *dk = dk_dev.download();
      *dv = dv_dev.download();
    }
  };
  const DeviceArray out_used_dev(pr.out_used, c.dt);
  DeviceBuffer lse_ref_dev(pr.lse_ref.size() * sizeof(float));
  CUDA_REQUIRE(cudaMemcpy(lse_ref_dev.get(), pr.lse_ref.data(), pr.lse_ref.size() * sizeof(float),
                          cudaMemcpyHostToDevice));
  backward(out_used_dev.ptr(), static_cast<const float*>(lse_ref_dev.get()), &res.dq, &res.dk,
           &res.dv);
  if (chained)
    backward(out_dev.ptr(), static_cast<const float*>(lse_dev.get()), &res.dq_chained,
             &res.dk_chained, &res.dv_chained);
  CUDA_REQUIRE(cudaStreamDestroy(stream));
  return res;
}

// Tolerances (see the top of the file).
double atol_of(const Case& c) {
  return c.dt == DType::f32 ? 1e-5 : 1e-2;
}
double rtol_of(const Case& c) {
  return c.dt == DType::f32 ? 1e-4 : 2e-2;
}
double lse_atol_of(const Case& c) {
  return c.kernel == AttentionKernel::tensor_core ? 1e-2 : 1e-5;
}
double lse_rtol_of(const Case& c) {
  return c.kernel == AttentionKernel::tensor_core ? 2e-3 : 1e-4;
}

// Runs forward and backward on the GPU (c.kernel) and on the CPU and compares
// them: out and lse, then the gradients from the CPU's out and lse. Tensor
// core cases also check the gradients from the GPU forward's own out and lse
// (the way a training step chains them: the backward consumes that lse).
void check_case(const Case& c) {
  INFO(describe(c));
  const double atol = atol_of(c), rtol = rtol_of(c);
  const bool chained = c.kernel == AttentionKernel::tensor_core;
  const Problem pr = make_problem(c);
  const GpuResult got = run_gpu(c, pr, c.kernel, chained);
  require_close("out", got.out, pr.out_ref, atol, rtol);
  require_close("lse", got.lse, pr.lse_ref, lse_atol_of(c), lse_rtol_of(c));
  require_close("dq", got.dq, pr.dq_ref, atol, rtol);  // packed gradients: dq, dk and dv
  if (!pr.grad_packed) {
    require_close("dk", got.dk, pr.dk_ref, atol, rtol);
    require_close("dv", got.dv, pr.dv_ref, atol, rtol);
  }
  if (chained) {
    require_close("dq (chained)", got.dq_chained, pr.dq_ref, atol, rtol);
    if (!pr.grad_packed) {
      require_close("dk (chained)", got.dk_chained, pr.dk_ref, atol, rtol);
      require_close("dv (chained)", got.dv_chained, pr.dv_ref, atol, rtol);
    }
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

// ---- AttentionKernel::tensor_core -----------------------------------------------------

// D (every bucket: 32, 64, 128), T (single row, partial tiles, one full tile,
// several tiles with a partial last one), MHA / GQA / MQA with and without
// RoPE, B = 2, at one 16-bit dtype.
void tensor_core_sweep(DType dt, uint64_t seed) {
  for (int64_t head_dim : {32, 64, 128}) {
    for (int64_t seq : {1, 17, 64, 100, 257}) {
      for (int64_t n_kv_head : {4, 2, 1}) {
        for (bool rope : {false, true}) {
          Case c;
          c.batch = 2;
          c.seq = seq;
          c.n_head = 4;
          c.n_kv_head = n_kv_head;
          c.head_dim = head_dim;
          c.rope = rope;
          c.dt = dt;
          c.kernel = AttentionKernel::tensor_core;
          c.seed = seed++;
          check_case(c);
        }
      }
    }
  }
}

TEST_CASE("attention tensor_core bf16 matches cpu attention (D, T, GQA and RoPE sweep)") {
  tensor_core_sweep(DType::bf16, 600);
}

TEST_CASE("attention tensor_core f16 matches cpu attention (D, T, GQA and RoPE sweep)") {
  tensor_core_sweep(DType::f16, 700);
}

TEST_CASE(
    "attention tensor_core: packed GPT-2 layout, padded head_dim buckets, non-default scale") {
  // Packed c_attn output (q, k, v in one [B, T, 3*H*D] buffer, dq/dk/dv in one
  // gradient buffer), then D = 16, 48, 96 and 112 (zero-padded in the 32, 64
  // and 128 buckets) with a scale that is not a power of two.
  for (DType dt : {DType::bf16, DType::f16}) {
    Case packed;
    packed.seq = 130;
    packed.n_head = packed.n_kv_head = 3;
    packed.head_dim = 64;
    packed.packed = true;
    packed.dt = dt;
    packed.kernel = AttentionKernel::tensor_core;
    packed.seed = 800;
    check_case(packed);
    for (int64_t head_dim : {16, 48, 96, 112}) {
      Case c;
      c.seq = 70;
      c.n_head = 4;
      c.n_kv_head = 2;
      c.head_dim = head_dim;
      c.rope = true;
      c.scale = 0.3;
      c.dt = dt;
      c.kernel = AttentionKernel::tensor_core;
      c.seed = 810 + static_cast<uint64_t>(head_dim);
      check_case(c);
    }
  }
}

TEST_CASE("attention tensor_core and simt agree within 16-bit tolerance") {
  // Same inputs, same (out, lse) for the backward: the two kernel families
  // differ only by the tensor-core path's 16-bit operand rounding.
  uint64_t seed = 900;
  for (DType dt : {DType::bf16, DType::f16}) {
    for (int64_t head_dim : {64, 128}) {
      for (int64_t seq : {33, 200}) {
        Case c;
        c.seq = seq;
        c.n_head = 4;
        c.n_kv_head = 2;
        c.head_dim = head_dim;
        c.rope = seq == 200;
        c.dt = dt;
        c.kernel = AttentionKernel::tensor_core;
        c.seed = seed++;
        INFO(describe(c));
        const Problem pr = make_problem(c);
        const GpuResult simt = run_gpu(c, pr, AttentionKernel::simt, false);
        const GpuResult tc = run_gpu(c, pr, AttentionKernel::tensor_core, false);
        const double atol = atol_of(c), rtol = rtol_of(c);
        require_close("out tc vs simt", tc.out, simt.out, atol, rtol);
        require_close("lse tc vs simt", tc.lse, simt.lse, lse_atol_of(c), lse_rtol_of(c));
        require_close("dq tc vs simt", tc.dq, simt.dq, atol, rtol);
        require_close("dk tc vs simt", tc.dk, simt.dk, atol, rtol);
        require_close("dv tc vs simt", tc.dv, simt.dv, atol, rtol);
      }
    }
  }
}

TEST_CASE("attention tensor_core T=4096 bf16 (many key tiles, GQA, RoPE) matches the cpu") {
  Case c;
  c.batch = 1;
  c.seq = 4096;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.head_dim = 64;
  c.rope = true;
  c.dt = DType::bf16;
  c.kernel = AttentionKernel::tensor_core;
  c.seed = 950;
  check_case(c);
}

// ---- the attributes of every dense family -----------------------------------------------

// `base` with each kernel family (tensor_core: bf16 and f16) and f32 / bf16
// for simt, so every attribute runs forward and backward on both families.
void both_families(Case base, uint64_t seed) {
  for (DType dt : {DType::f32, DType::bf16}) {
    Case c = base;
    c.dt = dt;
    c.kernel = AttentionKernel::simt;
    c.seed = seed++;
    check_case(c);
  }
  for (DType dt : {DType::bf16, DType::f16}) {
    Case c = base;
    c.dt = dt;
    c.kernel = AttentionKernel::tensor_core;
    c.seed = seed++;
    check_case(c);
  }
}

TEST_CASE("attention with a sliding window matches the cpu, tiles outside it skipped") {
  // T = 200 spans 4 tiles of 64: windows of 1 (only the diagonal), 8 (Gemma 2
  // tiny), 63, 64 and 100 make the first key tile of late query tiles > 0 and
  // leave rows whose first visited tile holds none of their keys.
  uint64_t seed = 1000;
  for (int64_t window : {1, 8, 63, 64, 100, 300}) {
    Case c;
    c.seq = 200;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.head_dim = 32;
    c.rope = true;
    c.window = window;
    both_families(c, seed);
    seed += 10;
  }
}

TEST_CASE("attention with soft-capped scores (Gemma 2) matches the cpu, forward and backward") {
  Case c;
  c.seq = 130;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 64;
  c.rope = true;
  c.scale = 1.0;  // scores of several units, so that a cap of 2 bends them
  c.softcap = 2.0;
  both_families(c, 1100);
  c.window = 40;  // Gemma 2's sliding layers: window and cap together
  both_families(c, 1110);
}

TEST_CASE("attention with partial rotary (GPT-NeoX's rotary_pct, Phi) matches the cpu") {
  uint64_t seed = 1200;
  for (int64_t rotary_dim : {2, 16, 32}) {  // of head_dim 64
    Case c;
    c.seq = 100;
    c.n_head = 4;
    c.n_kv_head = 4;
    c.head_dim = 64;
    c.rope = true;
    c.rotary_dim = rotary_dim;
    both_families(c, seed);
    seed += 10;
  }
}

TEST_CASE("attention on GPT-NeoX's per-head [H, 3, D] qkv with partial rotary matches the cpu") {
  Case c;
  c.seq = 90;
  c.n_head = c.n_kv_head = 4;
  c.head_dim = 32;
  c.rope = true;
  c.rotary_dim = 8;
  c.packed = true;
  c.per_head = true;
  both_families(c, 1300);
}

TEST_CASE("attention on a packed q|k|v with grouped KV heads (Phi-3) matches the cpu") {
  Case c;
  c.seq = 77;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 48;
  c.rope = true;
  c.packed = true;
  c.window = 20;  // Phi-3's window
  both_families(c, 1400);
}

TEST_CASE("attention reading repeated k, v copies and writing packed gradients matches the cpu") {
  // repeat_kv (plan/sdpa.h kv_copied): q and the k, v copies [B, T, H*D],
  // the gradient strides those of the packed projection.
  Case c;
  c.seq = 70;
  c.n_head = 6;
  c.n_kv_head = 2;
  c.head_dim = 32;
  c.rope = true;
  c.copied_kv = true;
  c.window = 16;
  both_families(c, 1500);
}

}  // namespace
}  // namespace shardscope::engine::cuda
