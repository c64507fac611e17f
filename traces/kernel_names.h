// What a GPU kernel is, from its name: the NCCL collectives by their kernel
// names (ncclKernel_AllGather_RING_LL_Sum_int8_t, ncclDevKernel_ReduceScatter_Sum_f32_RING_LL,
// ...), every other kernel compute. One rule for every source that only has
// kernel names: the Kineto importer and the CUPTI recorder.
#pragma once

#include <cstdint>
#include <string_view>

#include "traces/trace.h"

namespace shardscope::traces {

// True for NCCL's device kernels: a name starting with "nccl", demangled
// ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)") or
// mangled ("_Z30ncclDevKernel_AllGather_RING_LL...").
bool is_nccl_kernel(std::string_view kernel_name);

// The collective of an NCCL kernel: AllGather -> comm.all_gather, ReduceScatter
// -> comm.reduce_scatter, AllReduce -> comm.all_reduce; anything else
// (Broadcast, Reduce, SendRecv, AllToAll, Generic...) -> comm.other.
Category nccl_kernel_category(std::string_view kernel_name);

// nccl_kernel_category for NCCL kernels, Category::compute for every other kernel.
Category kernel_category(std::string_view kernel_name);

// "ProfilerStep#12" (torch.profiler's step annotation) -> true and *number = 12;
// false for any other name (no digits, trailing text, more than 18 digits).
bool parse_profiler_step(std::string_view name, int64_t* number);

}  // namespace shardscope::traces
