// The PyTorch op behind each kernel of a CUPTI recording, from PyTorch's
// NVTX ranges (emit_nvtx(record_shapes=True), traces/torch_nvtx.h), and the
// op type, FLOPs and bytes traces/op_cost.h computes for it. Pure functions
// over decoded records: no CUPTI or CUDA here.
//
// A kernel belongs to the innermost PyTorch op range open on the thread
// that launched it, when it was launched: the launch is the runtime or
// driver API call with the kernel's correlation id (Recording::launches);
// ranges are matched by CUPTI's thread ids and host-clock times
// (start <= launch start <= end). Ranges of other code (no op_id field) are
// looked through. Backward work: autograd runs backward nodes
// ("MmBackward0, seq = N") on its own threads, and the ops inside them run
// without grad mode, so without a seq field; walking out from the op's
// range, the first range carrying a seq decides: a backward node makes the
// kernel backward, anything else (the op itself, or a forward op
// recomputed by activation checkpointing) forward. Ops named "*backward*"
// (aten::_flash_attention_backward) are backward by name.
//
// As for Kineto traces (traces/kineto_import.cpp), an op instance's FLOPs
// and bytes go on its longest kernel, so that a sum over kernels counts each
// op once; the others stay without.
//
// Dtype: NVTX ranges carry none. The kernel's name decides
// (traces::kernel_dtype): bytes are those of that dtype; a kernel whose name
// states none keeps its FLOPs, gets no bytes, and is counted under dtype
// "unknown" (never a guess).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "profiler/cupti/cupti_recorder.h"
#include "traces/torch_nvtx.h"

namespace shardscope::profiler {

// What became of the recording's compute kernels (every kernel but NCCL's).
// Each kernel is counted in exactly one of the fields after `kernels`.
struct TorchOpSummary {
  int64_t kernels = 0;
  int64_t with_flops = 0;
  int64_t no_launch_record = 0;           // no API call with its correlation id was recorded
  int64_t graph_replay = 0;               // ran in a CUDA graph: captured under other ops than the
                                          // one open at replay
  int64_t outside_op_range = 0;           // launched outside any PyTorch op range
  int64_t range_without_sizes = 0;        // its op range has no sizes (record_shapes off)
  int64_t range_malformed = 0;            // its op range looks like PyTorch's but does not parse
  int64_t op_not_costed = 0;              // op_cost does not cover the op or its shapes
  int64_t flops_on_other_kernel = 0;      // its op's FLOPs are on the op's longest kernel
  std::map<std::string, int64_t> dtypes;  // kernels with FLOPs, by kernel_dtype_name
};

// The cost of one kernel; set == false: none (see TorchOpSummary for why).
struct KernelOpCost {
  bool set = false;
  uint64_t flops = 0;
  uint64_t bytes = 0;   // 0 when the dtype is unknown
  std::string op_type;  // "linear", "attention", "linear.backward", ...
  std::string op_name;  // the aten op: "aten::mm"
  traces::KernelDtype dtype = traces::KernelDtype::unknown;
};

// One entry per Recording::kernels entry (NCCL kernels: never set).
std::vector<KernelOpCost> torch_op_costs(const Recording& recording,
                                         TorchOpSummary* summary = nullptr);

// The summary as trace metadata (tool_versions "torch_nvtx.<field>", and
// "torch_nvtx.dtype.<name>"), added to counts already there;
// traces::torch_nvtx_notes reads them back.
void add_torch_op_summary(const TorchOpSummary& summary,
                          std::map<std::string, std::string>& tool_versions);

}  // namespace shardscope::profiler
