// The `mlp` preset's model: the config and its builder (plan/models_mlp.cpp).
// Graph conventions and cost formulas are in plan/graph_builder.h.
#pragma once

#include <cstdint>
#include <string>

#include "plan/graph.h"

namespace shardscope::plan {

// The `mlp` preset: a residual MLP classifier small enough to train on CPU.
// input_proj Linear(in, hidden) -> n_blocks x MLPBlock(LayerNorm, fc1
// Linear(hidden, ffn), ReLU, fc2 Linear(ffn, hidden), + skip) -> head
// Linear(hidden, classes) -> cross_entropy. Inputs x [B, in] f32, labels [B] i64.
struct MlpConfig {
  int64_t in_features = 64;
  int64_t hidden = 256;
  int64_t ffn = 512;
  int64_t n_blocks = 4;
  int64_t classes = 10;
  double layer_norm_epsilon = 1e-5;
};

Graph build_mlp(const MlpConfig& config, const std::string& name);

}  // namespace shardscope::plan
