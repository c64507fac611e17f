// Activation liveness for the step schedule: when each activation tensor is
// allocated and freed in forward, in activation-checkpointing recompute and in
// backward, and where each unit's forward span begins and ends.
//
// Rules (per micro-step):
//  - a tensor is allocated by the op that produces it (graph inputs at the
//    start of the micro-step);
//  - it is *kept* for backward when an op outside a checkpointed block saves
//    it, when it is an input of a checkpointed block (produced outside, used
//    inside), or when it is the loss; a kept tensor is freed after the
//    backward of the earliest op that needs it;
//  - otherwise it is freed after its last forward use (or right after the
//    producing op when nothing reads it);
//  - during a block's recompute, tensors produced in the block and saved by
//    ops of the block are kept until the earliest such op's backward; the
//    others die after their last use inside the block;
//  - per-op selective checkpointing (plan/op_checkpointing.h): the outputs of
//    a block's cached ops are held by the checkpoint's cache from forward to
//    the block's recompute, where the cached op does not run; from there on
//    they follow the recompute rule above;
//  - the gradient of a tensor appears at the backward of its last consumer and
//    is freed after the backward of its producer (none for requires_grad false);
//  - module buffers (Graph::buffers) are persistent: never freed in the step.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "plan/graph.h"
#include "plan/policy.h"
#include "plan/units.h"

namespace shardscope::plan {

// The units activation checkpointing applies to (indexed like
// UnitPlan::units): "blocks" are non-root units not nested in another
// non-root unit, in forward order; "full" checkpoints every block,
// {"every": k, "offset": o} and the per-op form blocks o, o + k, ...
// Throws Error when the policy checkpoints but the wrap yields no block.
std::vector<bool> checkpointed_units(const Policy& policy, const UnitPlan& units);

class ActivationPlan {
 public:
  explicit ActivationPlan(const Graph& graph);

  // Marks the checkpointed units (indexed like UnitPlan::units) and the
  // cached ops (indexed like Graph::ops, cached_ops(); empty: none) and
  // derives what is kept; must be called once before the queries below.
  // saved_overrides: ops whose kernel keeps other graph tensors for backward
  // than Op::saved lists (op -> those tensors: the math SDPA fallback,
  // sdpa_graph_saved in plan/sdpa.h).
  void set_checkpointed(const UnitPlan& units, const std::vector<bool>& checkpointed,
                        const std::vector<bool>& cached = {},
                        const std::map<int, std::vector<int>>& saved_overrides = {});
  // The tensors op `op` keeps for backward: Op::saved or its override.
  const std::vector<int>& saved(int op) const {
    const auto it = saved_overrides_.find(op);
    return it == saved_overrides_.end() ? g_.ops[static_cast<size_t>(op)].saved : it->second;
  }
  const std::map<int, std::vector<int>>& saved_overrides() const { return saved_overrides_; }

  // Floating, produced by an op and not marked requires_grad false.
  bool needs_grad(int tensor) const;
  // The unit whose compute dtype (its param_dtype: plan/overrides.h) a
  // floating tensor of Precision::compute takes, and its gradient too: the
  // innermost unit of the op producing it; the root for graph inputs. Ops
  // compute in their own unit's dtype (FSDP2 casts a unit's floating forward
  // inputs to its param_dtype: _fsdp_state.py FSDPState._pre_forward,
  // cast_forward_inputs); an input arriving in another unit's dtype is read
  // converted, the cast copy itself is not modelled (docs/policy.md,
  // "overrides"). Needs set_checkpointed.
  int tensor_unit(int tensor) const {
    return units_ && producer_[tensor] >= 0 ? units_->op_unit[producer_[tensor]] : 0;
  }
  // Bytes of a tensor: floating tensors take the compute dtype (`compute_bytes`).
  int64_t bytes(int tensor, const Workload& w, int compute_bytes) const;
  // The same for a tensor of `numel` elements (its count already evaluated).
  int64_t bytes_of(int tensor, int64_t numel, int compute_bytes) const;

  // Tensors to free right after op `op` runs forward (recompute: inside a block's recompute).
  const std::vector<int>& dead_after_forward(int op, bool recompute) const;
  // Tensors to free right after the backward of `op`.
  const std::vector<int>& released_after_backward(int op) const;

  // Units whose forward span starts (ends) at `op`, outermost first.
  // Precomputed by set_checkpointed.
  const std::vector<int>& units_entering(int op) const { return entering_[op]; }
  const std::vector<int>& units_leaving(int op) const { return leaving_[op]; }
  // Units in the order their backward starts.
  std::vector<int> backward_unit_order() const;

  // What set_checkpointed was given: a plan can stand in for another
  // schedule's (sweeps share them) only for the same units and blocks.
  const UnitPlan* units() const { return units_; }
  const std::vector<bool>& checkpointed() const { return checkpointed_; }
  // Per graph op: a cache hit in its block's recompute (it does not run).
  const std::vector<bool>& cached() const { return cached_; }
  bool cached(int op) const { return cached_[static_cast<size_t>(op)]; }

 private:
  const Graph& g_;
  const UnitPlan* units_ = nullptr;
  std::vector<bool> checkpointed_;
  std::vector<bool> cached_;  // per graph op
  std::map<int, std::vector<int>> saved_overrides_;
  std::vector<int> producer_;    // tensor -> op (-1: graph input or buffer)
  std::vector<bool> is_buffer_;  // Graph::buffers: never freed (persistent buffers)
  std::vector<int> last_use_;    // tensor -> last forward consumer (or producer)
  std::vector<std::vector<int>> dead_fwd_, dead_rc_, released_bwd_;
  std::vector<std::vector<int>> entering_, leaving_;
};

}  // namespace shardscope::plan
