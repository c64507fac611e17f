// FSDP units: which parameters one all-gather brings in, and how they are
// sharded (FSDP_SEMANTICS.md sections 1 and 2).
//
// Wrapping is post-order over the module tree. A parameter's *owner* for
// wrapping is the lowest common ancestor of the modules that use it (tied
// parameters such as GPT-2's wte/lm_head land in the lowest wrapped common
// ancestor of their users). A module that the policy wraps takes its
// "remainder": the parameters owned in its subtree not already taken by a
// wrapped descendant. The root is always a unit and takes what is left.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/graph.h"
#include "plan/policy.h"

namespace shardscope::plan {

struct Unit {
  std::string name;  // module path, "<root>" for the root
  int module = -1;   // module index of the wrapped module
  int parent = -1;   // index of the enclosing unit (-1 for the root)
  bool is_root = false;
  std::vector<int> params;  // parameter indices, graph order
  std::vector<int>
      modules;        // modules whose parameters the unit took (own subtree, minus nested units)
  int64_t numel = 0;  // sum of parameter elements, unpadded
  // Per-rank elements held by each rank, padded (both flavors):
  //   fsdp1: ceil(numel / N)                       (one flat parameter)
  //   fsdp2: sum over params of ceil(dim0 / N) * prod(other dims)
  int64_t shard_numel = 0;
  int64_t padded_numel = 0;         // N * shard_numel: the unsharded all-gather buffer
  int first_op = -1, last_op = -1;  // forward span: ops of the module's subtree (-1 if none)
};

struct UnitPlan {
  World world;
  std::vector<Unit> units;            // forward order: units[0] is the root
  std::vector<int> param_unit;        // parameter index -> unit index
  std::vector<int> op_unit;           // op index -> innermost unit whose module contains the op
  std::vector<std::string> warnings;  // e.g. a wrap class that matches no module

  int64_t total_padded_numel() const;  // Psi with padding: sum of padded_numel
  int64_t total_shard_numel() const;   // per-rank elements over all units
};

// Throws plan::Error naming the policy key (wrap.classes, wrap.modules, ...).
UnitPlan build_units(const Graph& graph, const Policy& policy, const World& world);

// Everything of (policy, world) that build_units reads (flavor, wrap, world):
// two inputs with the same key give the same UnitPlan for one graph, so
// sweeps build units once per key. Keep it in step with build_units.
std::string units_key(const Policy& policy, const World& world);

// Elements per rank of one tensor sharded on dim 0 over n ranks, padded.
int64_t fsdp2_shard_numel(const std::vector<int64_t>& shape, int64_t n);
int64_t ceil_div(int64_t a, int64_t b);

}  // namespace shardscope::plan
