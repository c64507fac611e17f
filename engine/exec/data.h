// Training data: per global sample index, deterministic from the seed (so
// every world size sees the same global batch; ARCHITECTURE.md's
// data-parallel semantics). Token models: a sequence of T+1 tokens, input ids
// the first T and labels the last T (next-token prediction). MLP: features
// x[in] ~ N(0, 1) and a class label.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/graph.h"
#include "plan/schedule.h"

namespace shardscope::engine::exec {

class DataSource {
 public:
  // Synthetic tokens (uniform over the vocabulary) or features, from `seed`.
  DataSource(const plan::Graph& graph, uint64_t seed);
  // Byte-level text: sample g is a window of T+1 bytes of the file at a
  // seeded offset. The model's vocabulary must hold the 256 byte values.
  // Throws std::invalid_argument "--data PATH: ..." unless PATH is a readable
  // regular file of >= 2 bytes and the model holds the 256 byte values; reads
  // nothing (a launcher checks this before starting its ranks).
  static void check_text_file(const plan::Graph& graph, const std::string& path);
  static DataSource from_text_file(const plan::Graph& graph, uint64_t seed,
                                   const std::string& path);

  // Fills graph input `tensor` (input_ids / labels / x) for global samples
  // [first, first + batch) at sequence length seq into `out` (its dtype: i64 or f32).
  void fill(int tensor, int64_t first, int64_t batch, int64_t seq, void* out) const;

 private:
  const plan::Graph* g_;
  uint64_t seed_;
  std::vector<uint8_t> text_;  // empty: synthetic
  uint64_t token_at(int64_t sample, int64_t pos, int64_t seq) const;
};

// Counter-based random numbers: the same (seed, stream, index) always gives
// the same value, whatever the order of calls.
inline uint64_t mix64(uint64_t x) {  // splitmix64's step and finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t hash_name(const std::string& name);
double uniform01(uint64_t seed, uint64_t stream, uint64_t index);  // (0, 1)
double normal01(uint64_t seed, uint64_t stream, uint64_t index);   // Box-Muller

// How parameter `param` is initialised (GPT-2/Llama conventions: normal(0,
// 0.02) weights, GPT-2's residual projections scaled by 1/sqrt(2 n_layer),
// norm weights 1, biases 0). Made once per parameter: value() and fill() are
// the per-element part. Normal values come from the counter-based ziggurat
// (normal_ziggurat.h, key mix64(seed ^ mix64(stream))): element i of a
// parameter's row-major flattening is the same whichever rank generates it,
// at >= 100 M elements per second per core (bench/bench_init).
struct ParamInit {
  enum class Kind : uint8_t { zero, one, normal } kind = Kind::normal;
  double std = 0.02;    // Kind::normal: standard deviation
  uint64_t stream = 0;  // Kind::normal: hash_name(the parameter's name)
  // Elements from this index on are 0 whatever the kind: the padded rows
  // [V, Vp) of a padded vocabulary's parameters (plan/vocab_padding.h), so
  // that rows [0, V) are the unpadded model's values, element for element.
  int64_t zero_from = INT64_MAX;
  float value(int64_t index, uint64_t seed) const;
  // out[j] = value(first + j, seed) for j in [0, count).
  void fill(int64_t first, int64_t count, uint64_t seed, float* out) const;
};
ParamInit param_init(const plan::Graph& graph, int param);

// Initial value of element `index` of parameter `param`: param_init(graph,
// param).value(index, seed).
float initial_value(const plan::Graph& graph, int param, int64_t index, uint64_t seed);

// Writes this rank's micro-batch `micro_step` of graph input buffer `b` (role
// input) into `dst` in the buffer's dtype: integer ids as they are, float
// features made in fp32 and rounded as the casts would. Samples
// [(micro_step * W + rank) * B, +B) of the global batch stream.
void fill_input(const DataSource& data, const plan::Schedule& schedule, const plan::Buffer& b,
                int micro_step, void* dst);

}  // namespace shardscope::engine::exec
