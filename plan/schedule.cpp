// Names and small helpers of the schedule types; the builder is in
// schedule_builder.cpp, the checker in schedule_check.cpp.
#include "plan/schedule.h"

#include <string>

namespace shardscope::plan {

const char* stream_role_name(StreamRole role) {
  switch (role) {
    case StreamRole::host:
      return "host";
    case StreamRole::compute:
      return "compute";
    case StreamRole::unshard:
      return "unshard";
    case StreamRole::pre_unshard:
      return "pre_unshard";
    case StreamRole::ag_copy_in:
      return "ag_copy_in";
    case StreamRole::all_gather:
      return "all_gather";
    case StreamRole::reduce_scatter:
      return "reduce_scatter";
    case StreamRole::all_reduce:
      return "all_reduce";
  }
  return "?";
}

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::forward:
      return "forward";
    case OpKind::backward:
      return "backward";
    case OpKind::recompute:
      return "recompute";
    case OpKind::cast_params:
      return "cast_params";
    case OpKind::copy_out:
      return "copy_out";
    case OpKind::reshard_copy:
      return "reshard_copy";
    case OpKind::all_gather:
      return "all_gather";
    case OpKind::reduce_scatter:
      return "reduce_scatter";
    case OpKind::all_reduce:
      return "all_reduce";
    case OpKind::grad_cast:
      return "grad_cast";
    case OpKind::grad_accumulate:
      return "grad_accumulate";
    case OpKind::grad_norm:
      return "grad_norm";
    case OpKind::grad_scale:
      return "grad_scale";
    case OpKind::inf_check:
      return "inf_check";
    case OpKind::optimizer:
      return "optimizer";
    case OpKind::h2d:
      return "h2d";
    case OpKind::d2h:
      return "d2h";
  }
  return "?";
}

bool is_collective(OpKind kind) {
  return kind == OpKind::all_gather || kind == OpKind::reduce_scatter || kind == OpKind::all_reduce;
}

bool is_compute(OpKind kind) {
  return !is_collective(kind) && kind != OpKind::h2d && kind != OpKind::d2h;
}

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::forward:
      return "forward";
    case Phase::backward:
      return "backward";
    case Phase::optimizer:
      return "optimizer";
  }
  return "?";
}

const char* buffer_category_name(BufferCategory c) {
  switch (c) {
    case BufferCategory::parameters:
      return "parameters";
    case BufferCategory::gradients:
      return "gradients";
    case BufferCategory::optimizer_state:
      return "optimizer_state";
    case BufferCategory::unsharded_params:
      return "unsharded_params";
    case BufferCategory::unsharded_grads:
      return "unsharded_grads";
    case BufferCategory::comm_buffers:
      return "comm_buffers";
    case BufferCategory::activations:
      return "activations";
    case BufferCategory::workspace:
      return "workspace";
  }
  return "?";
}

const char* action_kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::launch:
      return "launch";
    case ActionKind::alloc:
      return "alloc";
    case ActionKind::free:
      return "free";
    case ActionKind::host_wait:
      return "host_wait";
  }
  return "?";
}

const char* group_role_name(GroupRole role) {
  switch (role) {
    case GroupRole::world:
      return "world";
    case GroupRole::shard:
      return "shard";
    case GroupRole::replica:
      return "replica";
    case GroupRole::reshard:
      return "reshard";
  }
  return "?";
}

const char* buffer_role_name(BufferRole role) {
  switch (role) {
    case BufferRole::param_shard:
      return "param_shard";
    case BufferRole::grad_shard:
      return "grad_shard";
    case BufferRole::optimizer_state:
      return "optimizer_state";
    case BufferRole::h2d_shard:
      return "h2d_shard";
    case BufferRole::lowp_shard:
      return "lowp_shard";
    case BufferRole::ag_out:
      return "ag_out";
    case BufferRole::unsharded:
      return "unsharded";
    case BufferRole::post_fwd_slice:
      return "post_fwd_slice";
    case BufferRole::unsharded_grad:
      return "unsharded_grad";
    case BufferRole::accum_grad:
      return "accum_grad";
    case BufferRole::rs_in:
      return "rs_in";
    case BufferRole::rs_out:
      return "rs_out";
    case BufferRole::input:
      return "input";
    case BufferRole::activation:
      return "act";
    case BufferRole::recomputed:
      return "rc";
    case BufferRole::activation_grad:
      return "grad";
    case BufferRole::workspace:
      return "workspace";
    case BufferRole::kernel_saved:
      return "kernel_saved";
    case BufferRole::module_buffer:
      return "module_buffer";
    case BufferRole::optimizer_temp:
      return "optimizer_temp";
  }
  return "?";
}

BufferCategory buffer_role_category(BufferRole role) {
  switch (role) {
    case BufferRole::param_shard:
    case BufferRole::module_buffer:
      return BufferCategory::parameters;
    case BufferRole::grad_shard:
      return BufferCategory::gradients;
    case BufferRole::optimizer_state:
      return BufferCategory::optimizer_state;
    case BufferRole::h2d_shard:
    case BufferRole::lowp_shard:
    case BufferRole::ag_out:
    case BufferRole::rs_in:
    case BufferRole::rs_out:
      return BufferCategory::comm_buffers;
    case BufferRole::unsharded:
    case BufferRole::post_fwd_slice:
      return BufferCategory::unsharded_params;
    case BufferRole::unsharded_grad:
    case BufferRole::accum_grad:
      return BufferCategory::unsharded_grads;
    case BufferRole::input:
    case BufferRole::activation:
    case BufferRole::recomputed:
    case BufferRole::activation_grad:
    case BufferRole::kernel_saved:
      return BufferCategory::activations;
    case BufferRole::workspace:
    case BufferRole::optimizer_temp:
      return BufferCategory::workspace;
  }
  return BufferCategory::activations;
}

bool accumulates(BufferRole role) {
  return role == BufferRole::activation_grad || role == BufferRole::unsharded_grad ||
         role == BufferRole::accum_grad || role == BufferRole::grad_shard;
}

const char* op_purpose_name(OpPurpose purpose) {
  switch (purpose) {
    case OpPurpose::none:
      return "none";
    case OpPurpose::unscale:
      return "unscale";
    case OpPurpose::clip:
      return "clip";
    case OpPurpose::inf_flag:
      return "inf_flag";
    case OpPurpose::norm_sq:
      return "norm_sq";
  }
  return "?";
}

std::string buffer_name(const Graph& graph, const Buffer& b) {
  std::string out;
  if (b.micro >= 0) out = "m" + std::to_string(b.micro) + ".";
  if (b.tensor >= 0)
    return out + buffer_role_name(b.role) + "." +
           graph.tensors.at(static_cast<size_t>(b.tensor)).name;
  if (b.unit >= 0) out += "u" + std::to_string(b.unit) + ".";
  out += buffer_role_name(b.role);
  if (b.graph_op >= 0) out += "." + graph.ops.at(static_cast<size_t>(b.graph_op)).name;
  if (b.param >= 0) out += "." + graph.params.at(static_cast<size_t>(b.param)).name;
  return out;
}

int Schedule::stream_index(StreamRole role) const {
  for (size_t i = 0; i < stream_roles.size(); ++i)
    if (stream_roles[i] == role) return static_cast<int>(i);
  return -1;
}

int64_t Schedule::persistent_device_bytes() const {
  int64_t s = 0;
  for (const Buffer& b : buffers)
    if (b.persistent && !b.on_host) s += b.bytes;
  return s;
}

int64_t Schedule::persistent_host_bytes() const {
  int64_t s = 0;
  for (const Buffer& b : buffers)
    if (b.persistent && b.on_host) s += b.bytes;
  return s;
}

}  // namespace shardscope::plan
