#include "plan/activations.h"

#include <algorithm>
#include <string>

#include "plan/error.h"

namespace shardscope::plan {

ActivationPlan::ActivationPlan(const Graph& g) : g_(g) {
  const size_t nt = g.tensors.size();
  producer_.assign(nt, -1);
  last_use_.assign(nt, -1);
  is_buffer_.assign(nt, false);
  for (int t : g.buffers) is_buffer_[static_cast<size_t>(t)] = true;
  for (size_t o = 0; o < g.ops.size(); ++o) {
    for (int t : g.ops[o].outputs) {
      producer_[t] = static_cast<int>(o);
      last_use_[t] = std::max(last_use_[t], static_cast<int>(o));
    }
    for (int t : g.ops[o].inputs) last_use_[t] = std::max(last_use_[t], static_cast<int>(o));
  }
}

bool ActivationPlan::needs_grad(int t) const {
  const Tensor& tensor = g_.tensors[static_cast<size_t>(t)];
  return producer_[t] >= 0 && is_floating(tensor.dtype) && tensor.requires_grad;
}

int64_t ActivationPlan::bytes(int t, const Workload& w, int compute_bytes) const {
  return bytes_of(t, g_.tensors[t].numel_at(w), compute_bytes);
}

int64_t ActivationPlan::bytes_of(int t, int64_t numel, int compute_bytes) const {
  const Tensor& tensor = g_.tensors[t];
  const int64_t per = is_floating(tensor.dtype) ? precision_bytes(tensor.precision, compute_bytes)
                                                : dtype_bytes(tensor.dtype);
  return numel * per;
}

std::vector<bool> checkpointed_units(const Policy& policy, const UnitPlan& up) {
  std::vector<bool> checkpointed(up.units.size(), false);
  if (policy.activation_checkpointing == CheckpointMode::none) return checkpointed;
  std::vector<int> blocks;
  for (size_t u = 1; u < up.units.size(); ++u)
    if (up.units[u].parent == 0 && up.units[u].first_op >= 0) blocks.push_back(static_cast<int>(u));
  if (blocks.empty())
    throw Error("policy: activation_checkpointing: needs wrapped blocks to checkpoint, but wrap." +
                std::string("type \"") + wrap_type_name(policy.wrap.type) +
                "\" yields only the root unit");
  // full: every block; every and ops: blocks j % every == offset.
  const bool full = policy.activation_checkpointing == CheckpointMode::full;
  const int64_t every = full ? 1 : policy.checkpoint_every;
  const int64_t offset = full ? 0 : policy.checkpoint_offset;
  for (size_t j = 0; j < blocks.size(); ++j)
    if (static_cast<int64_t>(j) % every == offset) checkpointed[blocks[j]] = true;
  return checkpointed;
}

void ActivationPlan::set_checkpointed(const UnitPlan& up, const std::vector<bool>& ckpt,
                                      const std::vector<bool>& cached,
                                      const std::map<int, std::vector<int>>& saved_overrides) {
  units_ = &up;
  saved_overrides_ = saved_overrides;
  checkpointed_ = ckpt;
  cached_ = cached.empty() ? std::vector<bool>(g_.ops.size(), false) : cached;
  const size_t nt = g_.tensors.size(), no = g_.ops.size();
  // Checkpointed block of each op (-1 when none).
  std::vector<int> block(no, -1);
  for (size_t u = 0; u < up.units.size(); ++u) {
    if (!ckpt[u]) continue;
    for (int o = up.units[u].first_op; o <= up.units[u].last_op && o >= 0; ++o)
      block[o] = static_cast<int>(u);
  }
  entering_.assign(no, {});
  leaving_.assign(no, {});
  for (size_t u = 0; u < up.units.size(); ++u) {  // pre-order: outer units first
    if (up.units[u].first_op < 0) continue;
    entering_[up.units[u].first_op].push_back(static_cast<int>(u));
    leaving_[up.units[u].last_op].push_back(static_cast<int>(u));
  }
  const int kNone = static_cast<int>(no);
  std::vector<int> release(nt, kNone);     // kept: freed after this op's backward
  std::vector<int> rc_release(nt, kNone);  // kept through recompute
  for (size_t o = 0; o < no; ++o) {
    const Op& op = g_.ops[o];
    if (block[o] < 0) {
      for (int t : saved(static_cast<int>(o)))
        release[t] = std::min(release[t], static_cast<int>(o));
    } else {
      const Unit& b = up.units[block[o]];
      for (int t : op.inputs)
        if (producer_[t] < b.first_op) release[t] = std::min(release[t], b.first_op);
    }
  }
  if (g_.loss >= 0 && producer_[g_.loss] >= 0)
    release[g_.loss] = std::min(release[g_.loss], producer_[g_.loss]);
  // A cached tensor (an output of a cached op of a checkpointed block) is
  // held by the checkpoint's cache from forward until the recompute hands it
  // out again, even when the rules above release it earlier (in the backward
  // of a later block): then it lives on through the recompute like a
  // recomputed tensor.
  auto last_of_block = [&](int t) { return up.units[block[producer_[t]]].last_op; };
  auto cached_tensor = [&](int t) {
    return producer_[t] >= 0 && block[producer_[t]] >= 0 && cached_[producer_[t]];
  };
  auto held_to_recompute = [&](int t) {
    return cached_tensor(t) && (release[t] == kNone || release[t] > last_of_block(t));
  };
  for (size_t o = 0; o < no; ++o) {
    if (block[o] < 0) continue;
    for (int t : saved(static_cast<int>(o)))
      if ((release[t] == kNone || held_to_recompute(t)) && producer_[t] >= 0 &&
          block[producer_[t]] == block[o])
        rc_release[t] = std::min(rc_release[t], static_cast<int>(o));
  }
  dead_fwd_.assign(no, {});
  dead_rc_.assign(no, {});
  released_bwd_.assign(no, {});
  for (size_t ti = 0; ti < nt; ++ti) {
    const int t = static_cast<int>(ti);
    if (last_use_[t] < 0) continue;  // not touched by any op
    if (is_buffer_[ti]) continue;    // a module buffer: resident for the whole step
    const bool held = held_to_recompute(t);
    if (held) {
      // kept by the cache: no release in forward nor before the recompute
    } else if (release[t] != kNone) {
      released_bwd_[release[t]].push_back(t);
    } else {
      dead_fwd_[last_use_[t]].push_back(t);
    }
    const int p = producer_[t];
    if (p < 0 || block[p] < 0) continue;
    // Recompute of the producer's block (it runs before the backward of the
    // block's last op).
    const int block_last = up.units[block[p]].last_op;
    if (rc_release[t] != kNone) {
      released_bwd_[rc_release[t]].push_back(t);
    } else if (release[t] > block_last || held) {
      // Not live at the recompute (never kept, or already released by a later
      // op's backward): the recomputed value dies after its last use inside
      // the block. Tensors still kept from the first forward are recomputed as
      // duplicates that the builder drops right after the op. A cached tensor
      // is not recomputed: its forward buffer is handed out at its producer's
      // place in the recompute and freed by the same rule (at the producer
      // itself when no op of the block reads it).
      int last_in_block = p;
      for (size_t o = p; o < no && block[o] == block[p]; ++o)
        for (int in : g_.ops[o].inputs)
          if (in == t) last_in_block = static_cast<int>(o);
      dead_rc_[last_in_block].push_back(t);
    }
  }
}

const std::vector<int>& ActivationPlan::dead_after_forward(int op, bool recompute) const {
  return recompute ? dead_rc_[op] : dead_fwd_[op];
}

const std::vector<int>& ActivationPlan::released_after_backward(int op) const {
  return released_bwd_[op];
}

std::vector<int> ActivationPlan::backward_unit_order() const {
  std::vector<int> order;
  for (size_t o = g_.ops.size(); o-- > 0;)
    for (int u : leaving_[o]) order.push_back(u);
  return order;
}

}  // namespace shardscope::plan
