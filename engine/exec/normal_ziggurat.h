// Counter-based standard normal numbers, fast enough to initialise a model's
// weights at well over 100 M values per second on one core: value `index` of
// the sequence `key` is a pure function of (key, index), so any rank can
// generate any range of a parameter (its own shard) and get the values a
// single rank would (1-rank against N-rank equivalence), in any order.
//
// Method: Marsaglia and Tsang's ziggurat ("The Ziggurat Method for Generating
// Random Variables", J. Stat. Software 5(8), 2000) with 128 layers of equal
// area V = 9.91256303526217e-3 and base-strip edge R = 3.442619855899, in
// double precision. Draw k of value `index` is splitmix64's output for
// counter key + 8 * index + k (k < 8; later draws, needed with probability
// below 1e-15, hash once more); ~98.8% of values take one draw.
#pragma once

#include <cstdint>

namespace shardscope::engine::exec {

// A standard normal N(0, 1) value.
double ziggurat_normal(uint64_t key, uint64_t index);

// out[j] = scale * ziggurat_normal(key, first + j) for j in [0, count).
void fill_normal(uint64_t key, uint64_t first, int64_t count, double scale, float* out);

}  // namespace shardscope::engine::exec
