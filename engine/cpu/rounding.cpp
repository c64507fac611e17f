// Round-to-nearest-even of fp32 values to bf16 / fp16 precision, returned as
// fp32 (a cast to the narrow dtype and back). Bit manipulation on the fp32
// pattern; no dependence on the FPU's rounding mode except the fp16 subnormal
// path, which relies on the default round-to-nearest-even.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "engine/cpu/check.h"
#include "engine/cpu/optim.h"

namespace shardscope::engine::cpu {

namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

constexpr uint32_t kFp16Overflow = 0x47800000u;     // 65536.0f: 2^16, above fp16's max 65504
constexpr float kFp16MinNormal = 6.103515625e-05f;  // 2^-14

}  // namespace

float round_to_bf16(float x) {
  if (std::isnan(x)) return x;
  uint32_t u = bits_of(x);
  // Add 0x7fff plus the lowest kept bit: exact ties round to the even neighbour.
  // A carry into the exponent is the correct next binade; past the largest
  // finite value it yields the infinity pattern 0x7f800000.
  u += 0x7fffu + ((u >> 16) & 1u);
  return float_of(u & 0xffff0000u);
}

float round_to_fp16(float x) {
  if (std::isnan(x)) return x;
  const float a = std::fabs(x);
  float r;
  if (a < kFp16MinNormal) {
    // fp16 subnormals are multiples of 2^-24: adding 0.5 (whose ulp is 2^-24)
    // rounds a to that grid, ties to even, and subtracting it back is exact.
    r = (a + 0.5f) - 0.5f;
  } else {
    // Normal range: keep 10 of the 23 mantissa bits (drop 13, ties to even).
    uint32_t u = bits_of(a);
    u += 0xfffu + ((u >> 13) & 1u);
    u &= ~0x1fffu;
    r = u >= kFp16Overflow ? std::numeric_limits<float>::infinity() : float_of(u);
  }
  return std::copysign(r, x);
}

void round_inplace_bf16(float* x, int64_t n) {
  detail::require_nonneg("round_inplace_bf16", "n", n);
  detail::require_ptr("round_inplace_bf16", "x", x, n);
  for (int64_t i = 0; i < n; ++i) x[i] = round_to_bf16(x[i]);
}

void round_inplace_fp16(float* x, int64_t n) {
  detail::require_nonneg("round_inplace_fp16", "n", n);
  detail::require_ptr("round_inplace_fp16", "x", x, n);
  for (int64_t i = 0; i < n; ++i) x[i] = round_to_fp16(x[i]);
}

}  // namespace shardscope::engine::cpu
