// Helpers of the CUDA op tests (test_cuda_ops*.cpp): RAII device buffers and
// streams, host <-> device transfers with dtype conversion, seeded random
// inputs rounded to the operand dtype (so the CPU reference sees exactly the
// values the GPU reads), and the `tol + |ref| * eps` comparison.
//
// Tolerances (tol_for): the CPU op in fp32 on the same inputs is the
// reference; the GPU result differs by its own rounding to the output dtype
// (half an ulp: 2^-9 relative for bf16, 2^-12 for f16) plus the fp32
// differences of summation order and transcendental functions (a few ulps of
// fp32). eps is set to about two ulps of the output dtype (f32: 1e-5, covering
// reordered sums of up to a few hundred terms); tol is eps times the scale of
// the terms that make up a value (1 for elementwise ops on inputs in [-1, 1];
// sqrt of the reduction length for sums), which bounds the error of values
// that cancel to near zero.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/cpu/optim.h"
#include "engine/cuda/ops/dev_ptr.h"
#include "plan/graph.h"

namespace shardscope::engine::cuda::test {

using plan::DType;
using FVec = std::vector<float>;

#define SS_TEST_CUDA(expr) REQUIRE((expr) == cudaSuccess)

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) SS_TEST_CUDA(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class Stream {
 public:
  Stream() { SS_TEST_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  // Waits for the stream's work; a kernel fault surfaces here.
  void sync() const { SS_TEST_CUDA(cudaStreamSynchronize(s_)); }

 private:
  cudaStream_t s_ = nullptr;
};

// A value as stored in dtype dt (round to nearest even).
inline float round_to(DType dt, float v) {
  if (dt == DType::bf16) return cpu::round_to_bf16(v);
  if (dt == DType::f16) return cpu::round_to_fp16(v);
  return v;
}

inline FVec rounded(FVec v, DType dt) {
  for (float& x : v) x = round_to(dt, x);
  return v;
}

// n values uniform in [lo, hi), rounded to dt; never exactly zero.
inline FVec random_values(std::mt19937& rng, int64_t n, DType dt, float lo = -1.0f,
                          float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  FVec v(static_cast<size_t>(n));
  for (float& x : v) {
    do x = round_to(dt, dist(rng));
    while (x == 0.0f);
  }
  return v;
}

inline std::vector<unsigned char> encode(const FVec& v, DType dt) {
  std::vector<unsigned char> bytes(v.size() * static_cast<size_t>(plan::dtype_bytes(dt)));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::bf16) {
      const __nv_bfloat16 b = __float2bfloat16_rn(v[i]);
      std::memcpy(bytes.data() + 2 * i, &b, 2);
    } else if (dt == DType::f16) {
      const __half h = __float2half_rn(v[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(bytes.data() + 4 * i, &v[i], 4);
    }
  }
  return bytes;
}

inline FVec decode(const std::vector<unsigned char>& bytes, DType dt, size_t n) {
  FVec v(n);
  for (size_t i = 0; i < n; ++i) {
    if (dt == DType::bf16) {
      __nv_bfloat16 b;
      std::memcpy(&b, bytes.data() + 2 * i, 2);
      v[i] = __bfloat162float(b);
    } else if (dt == DType::f16) {
      __half h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      v[i] = __half2float(h);
    } else {
      std::memcpy(&v[i], bytes.data() + 4 * i, 4);
    }
  }
  return v;
}

// A device array of n floats stored as dt (plus `pad` spare elements in front,
// to test operands that are not 16-byte aligned: ptr() points past them).
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const FVec& values, DType dt, int64_t pad = 0)
      : dt_(dt),
        n_(static_cast<int64_t>(values.size())),
        pad_(pad),
        buf_(static_cast<size_t>((n_ + pad) * plan::dtype_bytes(dt))) {
    const std::vector<unsigned char> bytes = encode(values, dt);
    if (!bytes.empty())
      SS_TEST_CUDA(cudaMemcpy(ptr().ptr, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  }
  DevPtr ptr() const {
    return {static_cast<char*>(buf_.get()) + pad_ * plan::dtype_bytes(dt_), dt_};
  }
  ConstDevPtr cptr() const { return ptr(); }
  FVec download() const {
    std::vector<unsigned char> bytes(static_cast<size_t>(n_ * plan::dtype_bytes(dt_)));
    if (!bytes.empty())
      SS_TEST_CUDA(cudaMemcpy(bytes.data(), ptr().ptr, bytes.size(), cudaMemcpyDeviceToHost));
    return decode(bytes, dt_, static_cast<size_t>(n_));
  }
  DType dtype() const { return dt_; }

 private:
  DType dt_ = DType::f32;
  int64_t n_ = 0, pad_ = 0;
  DeviceBuffer buf_;
};

// Plain device array of a trivially copyable type (ids, labels, flags, scalars).
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& v) : n_(v.size()), buf_(v.size() * sizeof(T)) {
    if (n_ > 0)
      SS_TEST_CUDA(cudaMemcpy(buf_.get(), v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  T* get() const { return static_cast<T*>(buf_.get()); }
  std::vector<T> download() const {
    std::vector<T> v(n_);
    if (n_ > 0)
      SS_TEST_CUDA(cudaMemcpy(v.data(), buf_.get(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }

 private:
  size_t n_;
  DeviceBuffer buf_;
};

struct Tolerance {
  double tol, eps;
};

// See the header comment: eps ~ two ulps of the output dtype, tol = eps * scale.
inline Tolerance tol_for(DType out, double scale = 1.0) {
  const double eps = out == DType::bf16 ? 0.0078125 : (out == DType::f16 ? 0.0009765625 : 1e-5);
  return {eps * scale, eps};
}

// Every |got - ref| <= tol + |ref| * eps; reports the first mismatches.
inline void check_close(const FVec& got, const FVec& ref, Tolerance t, const std::string& what) {
  REQUIRE(got.size() == ref.size());
  size_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = t.tol + std::fabs(static_cast<double>(ref[i])) * t.eps;
    const double diff = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(diff <= bound)) {
      if (bad < 5) first << " [" << i << "] got " << got[i] << " ref " << ref[i];
      ++bad;
    }
  }
  INFO(what << ": " << bad << " of " << got.size() << " outside tol " << t.tol << " + |ref| * "
            << t.eps << first.str());
  CHECK(bad == 0);
}

inline const char* dtype_label(DType dt) {
  return plan::dtype_name(dt);
}

}  // namespace shardscope::engine::cuda::test
