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

std::string buffer_name(const Graph& graph, const Buffer& b) {
  std::string out;
  if (b.micro >= 0) out = "m" + std::to_string(b.micro) + ".";
  if (b.tensor >= 0)
    return out + b.what + "." + graph.tensors.at(static_cast<size_t>(b.tensor)).name;
  if (b.unit >= 0) out += "u" + std::to_string(b.unit) + ".";
  out += b.what;
  if (b.graph_op >= 0) out += "." + graph.ops.at(static_cast<size_t>(b.graph_op)).name;
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
