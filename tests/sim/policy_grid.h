// The policy grid the simulator's property tests run over (issue #4): both
// flavors x wrap x reshard_after_forward x backward prefetch x forward
// prefetch x limit_all_gathers (fsdp1) x mixed precision x CPU offload x
// activation checkpointing x world layout. Knobs that do not apply to a flavor
// are not set (validation rejects them).
//
// The full product is about 2,500 configurations per model, too many to
// simulate in a unit test. The grid is therefore split in two:
//  - the knobs the properties flip (reshard_after_forward, forward_prefetch,
//    limit_all_gathers) form a full product, so every configuration's
//    counterpart differing in one of them is in the grid;
//  - the other knobs (wrap + checkpointing, backward prefetch, precision,
//    offload, world) form "contexts" chosen by a greedy t-wise covering: every
//    combination of values of any t of those knobs appears in some context
//    (t = 3 for a thorough grid, 2 for a quick one).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardscope::test {

struct GridModel {
  std::string name;         ///< model preset
  std::string block_class;  ///< wrap.type "class" wraps every module of this class
  int64_t min_num_params;   ///< wrap.type "size" threshold
  int64_t batch_size;
  int64_t seq_len;
  int strength;  ///< 2 or 3: covering strength of the contexts
};

struct GridWorld {
  int64_t world_size;
  int64_t shard_group_size;  ///< N; N == world_size means plain FSDP
  int64_t reshard_k;         ///< fsdp2 reshard_after_forward integer, 1 < k < N
};

/// 8 ranks on one node (NVLink), 64 ranks on 8 nodes (inter-node rings),
/// and hybrid sharding over 64 ranks: shard within each node, 8 replicas.
inline std::vector<GridWorld> grid_worlds() {
  return {{8, 8, 2}, {64, 64, 8}, {64, 8, 2}};
}

struct GridPoint {
  nlohmann::json policy;  ///< only the keys that apply to the flavor
  int64_t world = 0;
  int64_t reshard_k = 0;  ///< the integer reshard_after_forward valid for this world
};

namespace detail {

// Greedy t-wise covering over knobs with `sizes` values each: candidates are
// the full product in lexicographic order; repeatedly take the first
// candidate covering the most combinations not yet covered. Deterministic.
inline std::vector<std::vector<int>> covering_rows(const std::vector<int>& sizes, int strength) {
  const int knobs = static_cast<int>(sizes.size());
  std::vector<std::vector<int>> candidates(1);
  for (int size : sizes) {
    std::vector<std::vector<int>> next;
    for (const auto& c : candidates)
      for (int v = 0; v < size; ++v) {
        next.push_back(c);
        next.back().push_back(v);
      }
    candidates = std::move(next);
  }
  std::vector<std::vector<int>> subsets;  // knob index subsets of size `strength`
  std::vector<int> pick;
  auto choose = [&](auto&& self, int from) -> void {
    if (static_cast<int>(pick.size()) == strength) {
      subsets.push_back(pick);
      return;
    }
    for (int k = from; k < knobs; ++k) {
      pick.push_back(k);
      self(self, k + 1);
      pick.pop_back();
    }
  };
  choose(choose, 0);
  auto keys_of = [&](const std::vector<int>& row) {
    std::vector<std::vector<int>> keys;
    for (size_t s = 0; s < subsets.size(); ++s) {
      std::vector<int> key = {static_cast<int>(s)};
      for (int k : subsets[s]) key.push_back(row[static_cast<size_t>(k)]);
      keys.push_back(std::move(key));
    }
    return keys;
  };
  std::set<std::vector<int>> uncovered;
  for (const auto& c : candidates)
    for (auto& key : keys_of(c)) uncovered.insert(std::move(key));
  std::vector<std::vector<int>> rows;
  while (!uncovered.empty()) {
    size_t best = 0;
    size_t best_gain = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      size_t gain = 0;
      for (const auto& key : keys_of(candidates[i])) gain += uncovered.count(key);
      if (gain > best_gain) {
        best_gain = gain;
        best = i;
      }
    }
    for (const auto& key : keys_of(candidates[best])) uncovered.erase(key);
    rows.push_back(candidates[best]);
  }
  return rows;
}

}  // namespace detail

/// Every grid configuration of one model, fsdp1 first. Batch size and
/// sequence length are set explicitly.
inline std::vector<GridPoint> property_policy_grid(const GridModel& m) {
  using nlohmann::json;
  struct WrapCkpt {
    json wrap;
    const char* checkpointing;
  };
  const json size_wrap = {{"type", "size"}, {"min_num_params", m.min_num_params}};
  const json class_wrap = {{"type", "class"}, {"classes", {m.block_class}}};
  // Checkpointing needs wrapped blocks: never with wrap "none".
  const std::vector<WrapCkpt> wraps = {{{{"type", "none"}}, "none"},
                                       {size_wrap, "none"},
                                       {size_wrap, "full"},
                                       {class_wrap, "none"},
                                       {class_wrap, "full"}};
  const std::vector<json> precisions = {{{"param_dtype", "fp32"}, {"reduce_dtype", "fp32"}},
                                        {{"param_dtype", "bf16"}, {"reduce_dtype", "bf16"}}};
  const std::vector<GridWorld> worlds = grid_worlds();

  std::vector<GridPoint> grid;
  for (const std::string flavor : {"fsdp1", "fsdp2"}) {
    const bool f1 = flavor == "fsdp1";
    const std::vector<std::string> backward = f1 ? std::vector<std::string>{"none", "pre", "post"}
                                                 : std::vector<std::string>{"none", "pre"};
    const std::vector<std::vector<int>> contexts = detail::covering_rows(
        {static_cast<int>(wraps.size()), static_cast<int>(backward.size()),
         static_cast<int>(precisions.size()), 2, static_cast<int>(worlds.size())},
        m.strength);
    for (const std::vector<int>& c : contexts) {
      const WrapCkpt& wc = wraps[static_cast<size_t>(c[0])];
      const GridWorld& w = worlds[static_cast<size_t>(c[4])];
      json base = {{"flavor", flavor},
                   {"wrap", wc.wrap},
                   {"activation_checkpointing", wc.checkpointing},
                   {"backward_prefetch", backward[static_cast<size_t>(c[1])]},
                   {"mixed_precision", precisions[static_cast<size_t>(c[2])]},
                   {"cpu_offload", c[3] == 1},
                   {"shard_group_size", w.shard_group_size},
                   {"batch_size", m.batch_size},
                   {"seq_len", m.seq_len}};
      // The flipped knobs: a full product.
      std::vector<json> reshards = {true, false};
      if (!f1) reshards.push_back(w.reshard_k);
      const std::vector<json> forwards =
          f1 ? std::vector<json>{false, true} : std::vector<json>{0, 1, 2};
      const std::vector<json> limits = f1 ? std::vector<json>{true, false} : std::vector<json>{};
      for (const json& reshard : reshards)
        for (const json& forward : forwards) {
          json p = base;
          p["reshard_after_forward"] = reshard;
          p["forward_prefetch"] = forward;
          if (!f1) {
            grid.push_back({p, w.world_size, w.reshard_k});
            continue;
          }
          for (const json& limit : limits) {
            json q = p;
            q["limit_all_gathers"] = limit;
            grid.push_back({q, w.world_size, w.reshard_k});
          }
        }
    }
  }
  return grid;
}

}  // namespace shardscope::test
