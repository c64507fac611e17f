// A small model of full tensors and the two FSDP ways of splitting it over ranks,
// written as a sharded checkpoint, for the sharded-checkpoint tests.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "tests/engine/checkpoint/checkpoint_test_util.h"

namespace shardscope::test {

struct ModelTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // row-major, numel values
};

// Five tensors: 5 rows (uneven on 2 and 3 ranks), a single element (empty slices on
// ranks > 0), an empty tensor, a scalar and an optimizer state.
inline std::vector<ModelTensor> small_model() {
  return {{"h.0.attn.weight", {5, 3}, test_values(1, 15)},
          {"h.0.attn.bias", {1}, test_values(2, 1)},
          {"empty", {0, 4}, {}},
          {"step_scale", {}, test_values(3, 1)},
          {"h.0.attn.weight.exp_avg", {5, 3}, test_values(4, 15)}};
}

inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// fsdp2: dim 0 split in ceil(rows / world)-row chunks; rank r holds rows
// [r * chunk, min((r + 1) * chunk, rows)) and pads to a full chunk. A rank-0 tensor
// counts as one row.
inline std::vector<std::vector<engine::checkpoint::IndexEntry>> split_dim0(
    const std::vector<ModelTensor>& model, int world) {
  std::vector<std::vector<engine::checkpoint::IndexEntry>> per_rank(static_cast<size_t>(world));
  for (const ModelTensor& t : model) {
    const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
    const int64_t row = rows == 0 ? 0 : numel(t.shape) / rows;
    const int64_t chunk = (rows + world - 1) / world;
    for (int r = 0; r < world; ++r) {
      const int64_t b = std::min(rows, r * chunk), e = std::min(rows, (r + 1) * chunk);
      per_rank[static_cast<size_t>(r)].push_back(
          {t.name, t.shape, b * row, e * row, (chunk - (e - b)) * row});
    }
  }
  return per_rank;
}

// fsdp1: the concatenation of all tensors, padded to a multiple of world, split in
// equal ranges; a rank's slice of a tensor is the intersection (possibly empty), and
// the flat padding belongs to the last slice of each rank that holds some.
inline std::vector<std::vector<engine::checkpoint::IndexEntry>> split_flat(
    const std::vector<ModelTensor>& model, int world) {
  int64_t total = 0;
  for (const ModelTensor& t : model) total += numel(t.shape);
  const int64_t per = (total + world - 1) / world;
  std::vector<std::vector<engine::checkpoint::IndexEntry>> per_rank(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const int64_t lo = r * per, hi = (r + 1) * per;
    int64_t start = 0;
    for (const ModelTensor& t : model) {
      const int64_t n = numel(t.shape);
      const int64_t b = std::clamp(lo - start, int64_t{0}, n),
                    e = std::clamp(hi - start, int64_t{0}, n);
      per_rank[static_cast<size_t>(r)].push_back({t.name, t.shape, b, std::max(b, e), 0});
      start += n;
    }
    const int64_t held = std::max<int64_t>(0, std::min(hi, total) - lo);
    per_rank[static_cast<size_t>(r)].back().padding = per - held;
  }
  return per_rank;
}

// Writes every rank's file, then the index; returns the entries.
inline void write_sharded(const std::string& dir, const std::vector<ModelTensor>& model,
                          const std::vector<std::vector<engine::checkpoint::IndexEntry>>& per_rank,
                          const engine::checkpoint::Metadata& meta) {
  const int world = static_cast<int>(per_rank.size());
  for (int r = 0; r < world; ++r) {
    std::vector<engine::checkpoint::Slice> slices;
    for (const engine::checkpoint::IndexEntry& e : per_rank[static_cast<size_t>(r)]) {
      const ModelTensor& t = *std::find_if(model.begin(), model.end(),
                                           [&](const ModelTensor& m) { return m.name == e.name; });
      slices.push_back({e.name, e.shape, e.begin, e.end, e.padding, t.values.data() + e.begin});
    }
    engine::checkpoint::write_shard_file(dir, r, world, slices, meta);
  }
  engine::checkpoint::write_shard_index(dir, world, per_rank, meta);
}

}  // namespace shardscope::test
