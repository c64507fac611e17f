// plan/trace_vocabulary: the one mapping of schedule streams, ops and buffers
// onto trace lanes and categories that the simulator and both engines use.
#include <catch2/catch.hpp>

#include "plan/trace_vocabulary.h"

using namespace shardscope;
using plan::OpKind;
using traces::Category;

TEST_CASE("trace_category: an op is compute exactly when plan::is_compute says it takes SMs",
          "[plan][trace_vocabulary]") {
  const auto last = static_cast<int>(OpKind::d2h);  // the enum's last value
  for (int k = 0; k <= last; ++k) {
    const auto kind = static_cast<OpKind>(k);
    INFO(plan::op_kind_name(kind));
    const Category c = plan::trace_category(kind);
    CHECK((c == Category::compute) == plan::is_compute(kind));
    CHECK(traces::is_comm(c) == plan::is_collective(kind));
  }
  CHECK(plan::trace_category(OpKind::all_gather) == Category::comm_all_gather);
  CHECK(plan::trace_category(OpKind::reduce_scatter) == Category::comm_reduce_scatter);
  CHECK(plan::trace_category(OpKind::all_reduce) == Category::comm_all_reduce);
  CHECK(plan::trace_category(OpKind::h2d) == Category::memcpy_h2d);
  CHECK(plan::trace_category(OpKind::d2h) == Category::memcpy_d2h);
  // fsdp2's copy-out and reshard copy are kernels (split_with_sizes_copy), as
  // Kineto and CUPTI report them: compute, in measured and predicted traces alike.
  CHECK(plan::trace_category(OpKind::copy_out) == Category::compute);
  CHECK(plan::trace_category(OpKind::reshard_copy) == Category::compute);
}

TEST_CASE("trace_lane_kind and trace_memory_category", "[plan][trace_vocabulary]") {
  using plan::BufferCategory;
  using plan::StreamRole;
  using traces::LaneKind;
  using traces::MemoryCategory;
  CHECK(plan::trace_lane_kind(StreamRole::host) == LaneKind::host);
  CHECK(plan::trace_lane_kind(StreamRole::compute) == LaneKind::compute);
  for (StreamRole r : {StreamRole::unshard, StreamRole::all_gather, StreamRole::reduce_scatter,
                       StreamRole::all_reduce})
    CHECK(plan::trace_lane_kind(r) == LaneKind::comm);
  CHECK(plan::trace_lane_kind(StreamRole::pre_unshard) == LaneKind::copy);
  CHECK(plan::trace_lane_kind(StreamRole::ag_copy_in) == LaneKind::copy);

  CHECK(plan::trace_memory_category(BufferCategory::parameters) == MemoryCategory::parameters);
  CHECK(plan::trace_memory_category(BufferCategory::unsharded_params) ==
        MemoryCategory::parameters);
  CHECK(plan::trace_memory_category(BufferCategory::gradients) == MemoryCategory::gradients);
  CHECK(plan::trace_memory_category(BufferCategory::unsharded_grads) == MemoryCategory::gradients);
  CHECK(plan::trace_memory_category(BufferCategory::optimizer_state) ==
        MemoryCategory::optimizer_state);
  CHECK(plan::trace_memory_category(BufferCategory::comm_buffers) == MemoryCategory::comm_buffers);
  CHECK(plan::trace_memory_category(BufferCategory::activations) == MemoryCategory::activations);
  CHECK(plan::trace_memory_category(BufferCategory::workspace) == MemoryCategory::temporaries);
}
