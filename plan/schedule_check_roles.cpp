// The typed-role part of check_schedule: buffer roles against categories,
// persistence, tensors, graph ops and dtypes; op purposes against kinds;
// process-group roles against the collectives that use them.
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "plan/error.h"
#include "plan/schedule.h"

namespace shardscope::plan::detail {

namespace {

// Persistent roles are those of the persistent categories (parameters,
// gradients, optimizer state: buffer_role_category).
bool is_persistent_role(BufferRole r) {
  const BufferCategory c = buffer_role_category(r);
  return c == BufferCategory::parameters || c == BufferCategory::gradients ||
         c == BufferCategory::optimizer_state;
}
bool is_tensor_role(BufferRole r) {
  return r == BufferRole::input || r == BufferRole::activation || r == BufferRole::recomputed ||
         r == BufferRole::activation_grad || r == BufferRole::module_buffer;
}
bool is_reduce_role(BufferRole r) {
  return r == BufferRole::rs_in || r == BufferRole::rs_out || r == BufferRole::accum_grad;
}

}  // namespace

void check_roles(const Graph& g, const Schedule& s, const std::function<void(std::string)>& err) {
  // Buffers: one param dtype and one reduce dtype per unit (policy
  // overrides may give units different ones). A tensor's buffers take its
  // unit's: the unit of the forward op producing it (the root's for graph
  // inputs), whichever op allocated them.
  std::vector<int> producer_unit(g.tensors.size(), 0);
  for (const ScheduleOp& op : s.ops) {
    if (op.kind != OpKind::forward || op.graph_op < 0 ||
        op.graph_op >= static_cast<int>(g.ops.size()))
      continue;
    for (int t : g.ops[static_cast<size_t>(op.graph_op)].outputs)
      if (t >= 0 && t < static_cast<int>(producer_unit.size()))
        producer_unit[static_cast<size_t>(t)] = op.unit;
  }
  std::map<std::pair<int, bool>, DType> shared_dtype;  // (unit, reduce?) -> dtype
  for (const Buffer& b : s.buffers) {
    const std::string name = "buffer " + buffer_name(g, b) + " (" + buffer_role_name(b.role) + ")";
    if (b.category != buffer_role_category(b.role))
      err(name + " has category " + buffer_category_name(b.category) + ", its role's is " +
          buffer_category_name(buffer_role_category(b.role)));
    // Gradient shards are transient under zero_grad(set_to_none=True).
    if (b.persistent != is_persistent_role(b.role) &&
        !(b.role == BufferRole::grad_shard && !b.persistent))
      err(name + (b.persistent ? " is persistent" : " is transient") + " against its role");
    if ((b.tensor >= 0) != is_tensor_role(b.role))
      err(name + (b.tensor >= 0 ? " names a tensor" : " names no tensor") + " against its role");
    if ((b.graph_op >= 0) !=
        (b.role == BufferRole::workspace || b.role == BufferRole::kernel_saved))
      err(name + (b.graph_op >= 0 ? " names a graph op" : " names no graph op") +
          " against its role");
    if (b.bytes % dtype_bytes(b.dtype) != 0)
      err(name + " of " + std::to_string(b.bytes) + " bytes is not a whole number of " +
          dtype_name(b.dtype) + " elements");
    if (b.tensor >= 0 && b.tensor < static_cast<int>(g.tensors.size()) &&
        !is_floating(g.tensors[static_cast<size_t>(b.tensor)].dtype)) {
      if (b.dtype != g.tensors[static_cast<size_t>(b.tensor)].dtype)
        err(name + " holds an integer tensor in " + dtype_name(b.dtype));
      continue;
    }
    const bool fp32_tensor = b.tensor >= 0 && b.tensor < static_cast<int>(g.tensors.size()) &&
                             g.tensors[static_cast<size_t>(b.tensor)].precision == Precision::fp32;
    // kernel_saved: fp32 (math SDPA) or, below, its unit's compute dtype (fused SDPA).
    if (b.role == BufferRole::kernel_saved && b.dtype == DType::f32) continue;
    if (b.role == BufferRole::optimizer_temp) {
      if (b.dtype != DType::f32) err(name + " is " + dtype_name(b.dtype) + ", not f32");
      if (b.param < 0) err(name + " names no parameter");
      continue;
    }
    // Module buffers are persistent in their tensor's dtype (checked below).
    if ((is_persistent_role(b.role) && b.role != BufferRole::module_buffer) ||
        b.role == BufferRole::h2d_shard || fp32_tensor) {
      if (b.dtype != DType::f32) err(name + " is " + dtype_name(b.dtype) + ", not f32");
      continue;
    }
    const int unit = b.tensor >= 0 && b.tensor < static_cast<int>(producer_unit.size())
                         ? producer_unit[static_cast<size_t>(b.tensor)]
                         : b.unit;
    const auto [it, fresh] =
        shared_dtype.emplace(std::make_pair(unit, is_reduce_role(b.role)), b.dtype);
    if (!fresh && it->second != b.dtype)
      err(name + " is " + dtype_name(b.dtype) + " where other " +
          (is_reduce_role(b.role) ? "reduce" : "param") + "-dtype buffers of unit " +
          std::to_string(unit) + " are " + dtype_name(it->second));
  }

  // Groups: group 0 is the world; every rank in one group of each role.
  if (s.groups.empty() || s.groups[0].role != GroupRole::world ||
      static_cast<int64_t>(s.groups[0].ranks.size()) != s.world.world_size)
    err("group 0 is not the world group");
  try {
    (void)rank_groups(s);
  } catch (const Error& e) {
    err(e.what());
  }

  // Ops: purposes against kinds; collectives against their group's role.
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const ScheduleOp& op = s.ops[i];
    const std::string name = "op " + std::to_string(i) + " (" + op_kind_name(op.kind) + ", " +
                             op_purpose_name(op.purpose) + ")";
    const bool scalar = op.kind == OpKind::all_reduce && op.buffers.empty();
    if (op.kind == OpKind::grad_scale) {
      if (op.purpose != OpPurpose::unscale && op.purpose != OpPurpose::clip)
        err(name + ": a grad_scale is an unscale or a clip");
    } else if (scalar) {
      if (op.purpose != OpPurpose::inf_flag && op.purpose != OpPurpose::norm_sq) {
        err(name + ": a scalar all-reduce carries an inf flag or a squared norm");
      } else {
        const OpKind producer =
            op.purpose == OpPurpose::inf_flag ? OpKind::inf_check : OpKind::grad_norm;
        bool found = false;
        for (int w : op.waits)
          found |= w >= 0 && w < static_cast<int>(s.ops.size()) &&
                   s.ops[static_cast<size_t>(w)].kind == producer;
        if (!found) err(name + " does not wait on the " + op_kind_name(producer) + " it reduces");
      }
    } else if (op.purpose != OpPurpose::none) {
      err(name + ": only grad_scale and scalar all-reduces have a purpose");
    }
    if (!is_collective(op.kind) || op.group < 0 || op.group >= static_cast<int>(s.groups.size()))
      continue;
    const GroupRole role = s.groups[static_cast<size_t>(op.group)].role;
    bool ok = false;
    switch (op.kind) {
      case OpKind::all_gather:
        ok = role == GroupRole::shard || role == GroupRole::reshard;
        break;
      case OpKind::reduce_scatter:
        ok = role == GroupRole::shard;
        break;
      default:  // all_reduce
        ok = scalar
                 ? role == (op.purpose == OpPurpose::inf_flag ? GroupRole::world : GroupRole::shard)
                 : role == GroupRole::replica;
        break;
    }
    if (!ok) err(name + " runs on a " + group_role_name(role) + " group");
  }
}

}  // namespace shardscope::plan::detail
