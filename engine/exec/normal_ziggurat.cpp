#include "engine/exec/normal_ziggurat.h"

#include <array>
#include <cmath>
#include <cstring>

#include "engine/exec/data.h"

namespace shardscope::engine::exec {

namespace {

constexpr int kLayers = 128;
constexpr double kR = 3.442619855899;       // right edge of the base strip
constexpr double kV = 9.91256303526217e-3;  // area of each layer
constexpr double kTwoPowMinus53 = 1.0 / 9007199254740992.0;

double density(double x) {  // unnormalised N(0,1) density
  return std::exp(-0.5 * x * x);
}

// x[i]: right edge of layer i (x[0] = V / f(R), the base strip's equivalent
// width; x[1] = R; decreasing to x[128] = 0). f[i] = density(x[i]).
// w[i] = x[i] / 2^53 scales the 53-bit integer u to z = u w[i] in [0, x[i]);
// box[i] = floor(2^53 x[i+1] / x[i]): u < box[i] exactly when z < x[i+1] up
// to the last bit (the integer test of the fast path; no float arithmetic).
struct Tables {
  std::array<double, kLayers + 1> x{}, f{};
  std::array<double, kLayers> w{};
  std::array<uint64_t, kLayers> box{};
  Tables() {
    x[0] = kV / density(kR);
    x[1] = kR;
    for (int i = 2; i < kLayers; ++i)
      x[i] = std::sqrt(-2.0 * std::log(kV / x[i - 1] + density(x[i - 1])));
    x[kLayers] = 0.0;
    for (int i = 0; i <= kLayers; ++i) f[i] = density(x[i]);
    for (int i = 0; i < kLayers; ++i) {
      w[i] = x[i] * kTwoPowMinus53;
      box[i] = static_cast<uint64_t>(x[i + 1] / x[i] * 9007199254740992.0);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

uint64_t draw(uint64_t counter, int k) {
  return k < 8 ? mix64(counter + static_cast<uint64_t>(k))
               : mix64(mix64(counter) + static_cast<uint64_t>(k));
}

double open_uniform(uint64_t bits) {  // (0, 1) from the top 53 bits
  return (static_cast<double>(bits >> 11) + 0.5) * kTwoPowMinus53;
}

// Everything after a first draw that fell outside its layer's box (~1.2%).
double normal_slow(const Tables& t, uint64_t counter, uint64_t b) {
  for (int k = 0;; ++k) {
    if (k > 0) b = draw(counter, k);
    const int layer = static_cast<int>(b & (kLayers - 1));
    const bool negative = (b >> 7) & 1;
    const double z = static_cast<double>(b >> 11) * t.w[layer];
    if ((b >> 11) < t.box[layer]) return negative ? -z : z;  // inside the layer's box
    if (layer == 0) {                                        // the tail beyond R (Marsaglia 1964)
      const double a = -std::log(open_uniform(draw(counter, ++k))) / kR;
      const double y = -std::log(open_uniform(draw(counter, ++k)));
      if (2.0 * y > a * a) return negative ? -(kR + a) : kR + a;
      continue;
    }
    // The wedge between the box and the curve.
    const double y = t.f[layer] + open_uniform(draw(counter, ++k)) * (t.f[layer + 1] - t.f[layer]);
    if (y < density(z)) return negative ? -z : z;
  }
}

inline double normal_with(const Tables& t, uint64_t key, uint64_t index) {
  const uint64_t counter = key + 8 * index;
  const uint64_t b = mix64(counter);  // draw(counter, 0)
  const int layer = static_cast<int>(b & (kLayers - 1));
  if ((b >> 11) < t.box[layer]) {
    // Bit 7 of b is the sign: moved to the double's sign bit, no branch
    // (a 50% branch would mispredict on every other value).
    const double z = static_cast<double>(b >> 11) * t.w[layer];
    uint64_t bits = 0;
    std::memcpy(&bits, &z, sizeof bits);
    bits ^= (b & 0x80u) << 56;
    double signed_z = 0;
    std::memcpy(&signed_z, &bits, sizeof bits);
    return signed_z;
  }
  return normal_slow(t, counter, b);
}

}  // namespace

double ziggurat_normal(uint64_t key, uint64_t index) {
  return normal_with(tables(), key, index);
}

void fill_normal(uint64_t key, uint64_t first, int64_t count, double scale, float* out) {
  const Tables& t = tables();
  for (int64_t j = 0; j < count; ++j)
    out[j] = static_cast<float>(scale * normal_with(t, key, first + static_cast<uint64_t>(j)));
}

}  // namespace shardscope::engine::exec
