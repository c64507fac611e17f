// RAII NVTX range around an op's launches (nvtx3, header-only): shows up in
// Nsight Systems and in our CUPTI recorder's MARKER records.
#pragma once

#include <nvtx3/nvToolsExt.h>

namespace shardscope::engine::cuda {

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace shardscope::engine::cuda
