// Where each parameter's elements live in a unit's buffers, for both FSDP
// flavors (FSDP_SEMANTICS.md sections 1-2; plan/units.h has the sizes).
// Three layouts of one unit, all of N * shard_numel elements except the shard:
//
//  shard      what rank index q of the shard group holds: shard_numel elements.
//             fsdp1: flat[q*S, (q+1)*S) of the flat parameter (the unit's
//             parameters concatenated in unit order, padded to N*S);
//             fsdp2: for each parameter p in unit order, rows [q*c_p, (q+1)*c_p)
//             of dim 0 (c_p = ceil(dim0/N)), padded to c_p rows: chunk_p =
//             c_p * (numel_p / dim0) elements at shard offset off_p.
//  gathered   the all-gather buffer: the N shards one after the other (rank q
//             at q*S). Reduce-scatter inputs use it too.
//  unsharded  what compute reads: fsdp1 the flat parameter (= gathered);
//             fsdp2 per-parameter storage, parameter p's full padded tensor at
//             N*off_p (its first numel_p elements are the tensor, row-major).
//
// Every rank holds one contiguous range of each parameter's flattening
// (possibly empty): what checkpoints save (engine/checkpoint/checkpoint.h).
#pragma once

#include <cstdint>
#include <vector>

#include "plan/graph.h"
#include "plan/policy.h"
#include "plan/units.h"

namespace shardscope::engine::exec {

struct ParamPlace {
  int param = -1;         // graph parameter index
  int64_t numel = 0;      // elements of the full tensor
  int64_t unsharded = 0;  // offset of element 0 in the unsharded layout
  // fsdp2 only: elements of one rank's chunk and its offset in the shard.
  int64_t chunk = 0, shard_offset = 0;
};

struct Range {
  int64_t begin = 0, end = 0;  // [begin, end) of a parameter's flattening
  int64_t size() const { return end - begin; }
};

class UnitLayout {
 public:
  UnitLayout(const plan::Graph& graph, const plan::Unit& unit, plan::Flavor flavor, int64_t n);

  int64_t shard_numel() const { return s_; }
  int64_t full_numel() const { return n_ * s_; }  // gathered and unsharded
  int64_t n() const { return n_; }
  const std::vector<ParamPlace>& params() const { return params_; }
  const ParamPlace* find(int param) const;  // nullptr when not in this unit

  // Gathered-layout index -> unsharded-layout index (identity for fsdp1).
  int64_t gathered_to_unsharded(int64_t index) const;
  // Copies between the two layouts (element size 4 or 2 bytes; `bytes_per_elem`).
  void gathered_to_unsharded(const void* gathered, void* unsharded, int bytes_per_elem) const;
  void unsharded_to_gathered(const void* unsharded, void* gathered, int bytes_per_elem) const;

  // The part of parameter `pp`'s flattening held by shard index q, and where it
  // starts in that rank's shard.
  Range held_range(const ParamPlace& pp, int64_t q) const;
  int64_t held_shard_offset(const ParamPlace& pp, int64_t q) const;

 private:
  plan::Flavor flavor_;
  int64_t n_ = 1, s_ = 0;
  std::vector<ParamPlace> params_;
};

// Where an unsharded-gradient operand of `numel` elements lands in its
// unit's unsharded layout of `layout_numel` elements: a per-parameter buffer
// (plan::Buffer::param >= 0, fsdp2) at that parameter's place, a whole-unit
// one at 0. Throws std::invalid_argument when the sizes disagree.
struct UnshardedPlace {
  int64_t offset = 0, numel = 0;
};
UnshardedPlace unsharded_place(int param, int64_t numel, int64_t layout_numel,
                               const UnitLayout* layout);

}  // namespace shardscope::engine::exec
