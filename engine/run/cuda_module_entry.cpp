// The entry point of the CUDA module, libshardscope_cuda.so
// (engine/cuda_module.h): the one symbol the module exports
// (cuda_module.map), returning the backend's functions and what the loader
// checks before it calls them.
#include "engine/cuda_module.h"
#include "engine/run/run.h"
#include "engine/run/run_internal.h"

#ifndef SHARDSCOPE_BUILD_ID
#error "SHARDSCOPE_BUILD_ID is defined by engine/run/CMakeLists.txt"
#endif

namespace {

namespace engine = shardscope::engine;
namespace run = shardscope::engine::run;

engine::CudaAvailability module_query() {
  return run::detail::cuda_devices();
}

run::RunResult module_run(const run::RunRequest& request) {
  return run::detail::run_cuda_backend(request);
}

}  // namespace

// The name is engine::kCudaModuleSymbol.
extern "C" __attribute__((visibility("default"))) const engine::CudaModuleEntry*
shardscope_cuda_module_v1() {
  static const engine::CudaModuleEntry entry = [] {
    engine::CudaModuleEntry e;
    e.abi = engine::kCudaModuleAbi;
    e.entry_size = sizeof(engine::CudaModuleEntry);
    e.build_id = SHARDSCOPE_BUILD_ID;
    e.request_size = sizeof(run::RunRequest);
    e.result_size = sizeof(run::RunResult);
    e.availability_size = sizeof(engine::CudaAvailability);
    e.query = module_query;
    e.run = module_run;
    return e;
  }();
  return &entry;
}
