#include "plan/trace_vocabulary.h"

namespace shardscope::plan {

traces::LaneKind trace_lane_kind(StreamRole role) {
  switch (role) {
    case StreamRole::host:
      return traces::LaneKind::host;
    case StreamRole::compute:
      return traces::LaneKind::compute;
    case StreamRole::unshard:
    case StreamRole::all_gather:
    case StreamRole::reduce_scatter:
    case StreamRole::all_reduce:
      return traces::LaneKind::comm;
    case StreamRole::pre_unshard:
    case StreamRole::ag_copy_in:
      return traces::LaneKind::copy;
  }
  return traces::LaneKind::other;
}

traces::Category trace_category(OpKind kind) {
  switch (kind) {
    case OpKind::all_gather:
      return traces::Category::comm_all_gather;
    case OpKind::reduce_scatter:
      return traces::Category::comm_reduce_scatter;
    case OpKind::all_reduce:
      return traces::Category::comm_all_reduce;
    case OpKind::h2d:
      return traces::Category::memcpy_h2d;
    case OpKind::d2h:
      return traces::Category::memcpy_d2h;
    default:
      return traces::Category::compute;
  }
}

traces::MemoryCategory trace_memory_category(BufferCategory category) {
  switch (category) {
    case BufferCategory::parameters:
    case BufferCategory::unsharded_params:
      return traces::MemoryCategory::parameters;
    case BufferCategory::gradients:
    case BufferCategory::unsharded_grads:
      return traces::MemoryCategory::gradients;
    case BufferCategory::optimizer_state:
      return traces::MemoryCategory::optimizer_state;
    case BufferCategory::comm_buffers:
      return traces::MemoryCategory::comm_buffers;
    case BufferCategory::activations:
      return traces::MemoryCategory::activations;
    case BufferCategory::workspace:
      return traces::MemoryCategory::temporaries;
  }
  return traces::MemoryCategory::other;
}

}  // namespace shardscope::plan
