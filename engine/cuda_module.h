// The CUDA module: everything of the engine that needs the CUDA libraries
// (cuBLASLt, NCCL, CUPTI, the CUDA runtime) is built into one shared object,
// libshardscope_cuda.so (engine/run/cuda_module_entry.cpp), written beside
// the `shardscope` executable. The executable links none of those libraries
// and loads the module (dlopen) only when a command uses a GPU: `run
// --backend cuda` and its device query (query_cuda, engine/device_info.h).
// Every other command starts in a few MB (docs/benchmarks.md, startup
// memory).
//
// The module's one entry point is the C symbol kCudaModuleSymbol, which
// returns a CudaModuleEntry. The module and the executable pass C++ objects
// (RunRequest, RunResult, std::string) to each other, so both must come from
// the same build: the entry carries the ABI version, the build id and the
// sizes of the types that cross, and the loader refuses a module whose
// values differ from its own, naming both.
//
// Where: $SHARDSCOPE_CUDA_MODULE when set (a path to the module), else
// kCudaModuleFile in the directory of /proc/self/exe.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/device_info.h"

namespace shardscope::engine {

namespace run {
struct RunRequest;
struct RunResult;
}  // namespace run

// Bump when CudaModuleEntry or the meaning of a function in it changes.
inline constexpr uint32_t kCudaModuleAbi = 1;
inline constexpr const char* kCudaModuleSymbol = "shardscope_cuda_module_v1";
inline constexpr const char* kCudaModuleFile = "libshardscope_cuda.so";
inline constexpr const char* kCudaModuleEnv = "SHARDSCOPE_CUDA_MODULE";

struct CudaModuleEntry {
  uint32_t abi = 0;           // kCudaModuleAbi of the module's build
  uint32_t entry_size = 0;    // sizeof(CudaModuleEntry)
  const char* build_id = "";  // SHARDSCOPE_BUILD_ID of the module's build
  // sizeof of the types that cross, as the module's build saw them.
  uint32_t request_size = 0;
  uint32_t result_size = 0;
  uint32_t availability_size = 0;
  // The devices, through the CUDA runtime (never throws; a runtime error is
  // the message of an unusable availability).
  CudaAvailability (*query)() = nullptr;
  // engine::run::run's CUDA backend (Role::rank, Role::emulated). Throws as
  // run() does.
  run::RunResult (*run)(const run::RunRequest& request) = nullptr;
};

// The module could not be loaded, or is not one of this build: the message
// names the file, the loader's (dlerror) text and what to do.
struct CudaModuleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Where the module is looked for (see the top of this file).
std::string cuda_module_path();

// The module, loaded on the first call (once per process, never unloaded).
// Throws CudaModuleError, on every call, when it cannot be loaded. Only in
// builds with CUDA (SHARDSCOPE_HAVE_CUDA).
const CudaModuleEntry& cuda_module();

}  // namespace shardscope::engine
