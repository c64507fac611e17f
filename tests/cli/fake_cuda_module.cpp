// Stand-ins for a bad libshardscope_cuda.so (tests/cli/test_cli_cuda_module.cpp),
// built three times: without the entry point (no SHARDSCOPE_FAKE_ABI), and
// with an entry point reporting SHARDSCOPE_FAKE_ABI (another ABI, or this
// one with another build id).
#include "engine/cuda_module.h"

#ifdef SHARDSCOPE_FAKE_ABI
extern "C" __attribute__((visibility("default"))) const shardscope::engine::CudaModuleEntry*
shardscope_cuda_module_v1() {
  static const shardscope::engine::CudaModuleEntry entry = [] {
    shardscope::engine::CudaModuleEntry e;
    e.abi = SHARDSCOPE_FAKE_ABI;
    e.entry_size = sizeof(e);
    e.build_id = "another build";
    return e;
  }();
  return &entry;
}
#else
extern "C" __attribute__((visibility("default"))) int not_the_cuda_module_entry() {
  return 0;
}
#endif
