#include "engine/exec/f32_view.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace shardscope::engine::exec {

uint16_t float_to_bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float bf16_bits_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

uint16_t float_to_fp16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (a < 0x38800000u) {                                               // subnormal or zero
    // value = a_float; subnormal step 2^-24: round(x * 2^24) to nearest even
    float f;
    std::memcpy(&f, &a, 4);
    const float scaled = f * 16777216.0f;  // exact (power of two)
    const auto m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);  // m <= 0x400 (0x400 = smallest normal)
  }
  // normal: rebias exponent 127 -> 15, round mantissa 23 -> 10 bits (nearest even)
  uint32_t v = a - 0x38000000u;  // exponent - 112
  v += 0xfffu + ((v >> 13) & 1u);
  return static_cast<uint16_t>(sign | (v >> 13));
}

float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float x;
  if (exp == 0) {
    x = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    const uint32_t u = 0x7f800000u | (man << 13);
    std::memcpy(&x, &u, 4);
  } else {
    const uint32_t u = ((exp + 112) << 23) | (man << 13);
    std::memcpy(&x, &u, 4);
  }
  return sign ? -x : x;
}

void load_f32(const void* src, plan::DType dt, float* dst, int64_t n) {
  switch (dt) {
    case plan::DType::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case plan::DType::bf16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(s[i]);
      return;
    }
    case plan::DType::f16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_bits_to_float(s[i]);
      return;
    }
    default:
      break;
  }
  throw std::invalid_argument(std::string("no fp32 view of ") + plan::dtype_name(dt) + " storage");
}

void store_f32(const float* src, void* dst, plan::DType dt, int64_t n) {
  switch (dt) {
    case plan::DType::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case plan::DType::bf16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16_bits(src[i]);
      return;
    }
    case plan::DType::f16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_fp16_bits(src[i]);
      return;
    }
    default:
      break;
  }
  throw std::invalid_argument(std::string("no fp32 view of ") + plan::dtype_name(dt) + " storage");
}

F32View::F32View(void* base, plan::DType dt, int64_t offset, int64_t n, bool read, bool write)
    : dt_(dt), n_(n), write_(write) {
  char* p = static_cast<char*>(base) + offset * plan::dtype_bytes(dt);
  dst_ = p;
  if (dt == plan::DType::f32) {
    ptr_ = reinterpret_cast<float*>(p);
    write_ = false;
    return;
  }
  scratch_.resize(static_cast<size_t>(n));
  if (read)
    load_f32(p, dt, scratch_.data(), n);
  else
    std::fill(scratch_.begin(), scratch_.end(), 0.0f);
  ptr_ = scratch_.data();
}

F32View::F32View(F32View&& o) noexcept
    : dst_(o.dst_), dt_(o.dt_), n_(o.n_), write_(o.write_), scratch_(std::move(o.scratch_)) {
  ptr_ = dt_ == plan::DType::f32 ? o.ptr_ : scratch_.data();
  o.write_ = false;
}

F32View::~F32View() {
  if (write_) store_f32(ptr_, dst_, dt_, n_);
}

}  // namespace shardscope::engine::exec
