// bf16 / fp16 round-to-nearest-even: specific values (ties, overflow,
// subnormals, NaN) and a sweep against an independent float64 reference.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "engine/cpu/optim.h"
#include "tests/engine/cpu/grad_check.h"

namespace shardscope::engine::cpu::test {
namespace {

const float kInf = std::numeric_limits<float>::infinity();

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
uint32_t to_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Rounds x to `precision` significant bits (implicit bit included) with the
// exponent of the leading bit clamped below at min_exp (subnormals), ties to
// even via nearbyint in the default rounding mode; |result| > max_finite is
// +-inf. Independent of the bit tricks of the implementation.
float round_ref(float x, int precision, int min_exp, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0f) return x;
  const double a = std::fabs(static_cast<double>(x));
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): leading bit at 2^(e-1)
  const int lead = std::max(e - 1, min_exp);
  const double quantum = std::ldexp(1.0, lead - (precision - 1));
  const double r = std::nearbyint(a / quantum) * quantum;
  const double out = r > max_finite ? std::numeric_limits<double>::infinity() : r;
  return static_cast<float>(std::copysign(out, static_cast<double>(x)));
}

const double kBf16Max = std::ldexp(255.0, 120);  // (2 - 2^-7) * 2^127
const double kFp16Max = 65504.0;

bool same(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || to_bits(a) == to_bits(b);
}

}  // namespace

TEST_CASE("bf16 rounding ties to even: 1+2^-8 -> 1, 1+3*2^-8 -> 1+2^-6, above a tie rounds up") {
  CHECK(round_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 1.0f);
  CHECK(round_to_bf16(1.0f + 3.0f * std::ldexp(1.0f, -8)) == 1.0f + std::ldexp(1.0f, -6));
  CHECK(round_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) ==
        1.0f + std::ldexp(1.0f, -7));
  CHECK(round_to_bf16(-(1.0f + std::ldexp(1.0f, -8))) == -1.0f);
  CHECK(round_to_bf16(3.140625f) == 3.140625f);  // representable: unchanged
}

TEST_CASE("bf16 rounding: float max overflows to inf, bf16 max kept, NaN stays NaN") {
  CHECK(round_to_bf16(std::numeric_limits<float>::max()) == kInf);
  CHECK(round_to_bf16(-std::numeric_limits<float>::max()) == -kInf);
  CHECK(round_to_bf16(from_bits(0x7f7f0000u)) == from_bits(0x7f7f0000u));
  CHECK(round_to_bf16(kInf) == kInf);
  CHECK(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isnan(round_to_bf16(-std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("fp16 rounding: 65504 is the max, 65519 -> 65504, 65520 -> inf (tie to even)") {
  CHECK(round_to_fp16(65504.0f) == 65504.0f);
  CHECK(round_to_fp16(65519.0f) == 65504.0f);
  CHECK(round_to_fp16(65520.0f) == kInf);
  CHECK(round_to_fp16(-65520.0f) == -kInf);
  CHECK(round_to_fp16(1e5f) == kInf);
  CHECK(round_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 1.0f);
  CHECK(round_to_fp16(1.0f + 3.0f * std::ldexp(1.0f, -11)) == 1.0f + std::ldexp(1.0f, -9));
  CHECK(round_to_fp16(0.1f) == 0.0999755859375f);  // nearest fp16 to 0.1
}

TEST_CASE("fp16 rounding of subnormals: multiples of 2^-24, ties to even, NaN stays NaN") {
  const float q = std::ldexp(1.0f, -24);  // smallest fp16 subnormal
  CHECK(round_to_fp16(q) == q);
  CHECK(round_to_fp16(0.5f * q) == 0.0f);      // tie between 0 and q: 0 is even
  CHECK(round_to_fp16(1.5f * q) == 2.0f * q);  // tie between q and 2q: 2q
  CHECK(round_to_fp16(2.5f * q) == 2.0f * q);  // tie between 2q and 3q: 2q
  CHECK(round_to_fp16(1.25f * q) == q);
  CHECK(round_to_fp16(0.75f * q) == q);
  CHECK(round_to_fp16(-1.5f * q) == -2.0f * q);
  CHECK(round_to_fp16(1e-8f) == 0.0f);
  CHECK(std::signbit(round_to_fp16(-1e-9f)));                            // -0 keeps its sign
  CHECK(round_to_fp16(std::ldexp(1.0f, -14)) == std::ldexp(1.0f, -14));  // min normal
  // 2^-14 - 2^-25: tie between 1023q and 1024q = 2^-14 (even).
  CHECK(round_to_fp16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)) == std::ldexp(1.0f, -14));
  CHECK(std::isnan(round_to_fp16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(round_to_fp16(-kInf) == -kInf);
}

TEST_CASE("bf16 and fp16 rounding agree with a float64 reference on 400k sampled floats") {
  std::mt19937_64 rng(71);
  std::uniform_int_distribution<uint32_t> any_bits;
  // fp16-relevant range: float exponents 2^-27 .. 2^17 (biased 100..144).
  std::uniform_int_distribution<uint32_t> fp16_exp(100, 144);
  int64_t bf16_bad = 0, fp16_bad = 0;
  float first_bad = 0.0f;
  for (int i = 0; i < 200000; ++i) {
    const float a = from_bits(any_bits(rng));
    uint32_t u = any_bits(rng);
    u = (u & 0x807fffffu) | (fp16_exp(rng) << 23);
    if (i % 4 == 0) u &= ~0x1fffu | 0x1000u;  // force exact fp16 ties
    const float b = from_bits(u);
    for (float x : {a, b}) {
      if (!same(round_to_bf16(x), round_ref(x, 8, -126, kBf16Max))) {
        ++bf16_bad;
        first_bad = x;
      }
      if (!same(round_to_fp16(x), round_ref(x, 11, -14, kFp16Max))) {
        ++fp16_bad;
        first_bad = x;
      }
    }
  }
  INFO("a mismatch at " << first_bad << " (bits " << to_bits(first_bad) << ")");
  CHECK(bf16_bad == 0);
  CHECK(fp16_bad == 0);
}

TEST_CASE("round_inplace_bf16 and round_inplace_fp16 round every element of an array") {
  FVec x = {1.0f + std::ldexp(1.0f, -8), 65520.0f, 0.1f};
  FVec y = x;
  round_inplace_bf16(x.data(), 3);
  round_inplace_fp16(y.data(), 3);
  for (size_t i = 0; i < 3; ++i) {
    const float orig[] = {1.0f + std::ldexp(1.0f, -8), 65520.0f, 0.1f};
    CHECK(x[i] == round_to_bf16(orig[i]));
    CHECK(y[i] == round_to_fp16(orig[i]));
  }
  CHECK(x[0] == 1.0f);
  CHECK(x[1] == 65536.0f);  // bf16 has the range: 65520 rounds to 65536
  CHECK(y[1] == kInf);
}

}  // namespace shardscope::engine::cpu::test
