// Loader of the CUDA module (cuda_module.h). CUDA builds only.
#include "engine/cuda_module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "engine/run/run.h"

#ifndef SHARDSCOPE_BUILD_ID
#error "SHARDSCOPE_BUILD_ID is defined by engine/CMakeLists.txt"
#endif

namespace shardscope::engine {

namespace {

// What this executable expects of the module: its own build's values.
CudaModuleEntry expected_entry() {
  CudaModuleEntry e;
  e.abi = kCudaModuleAbi;
  e.entry_size = sizeof(CudaModuleEntry);
  e.build_id = SHARDSCOPE_BUILD_ID;
  e.request_size = sizeof(run::RunRequest);
  e.result_size = sizeof(run::RunResult);
  e.availability_size = sizeof(CudaAvailability);
  return e;
}

std::string describe(const CudaModuleEntry& e) {
  return "ABI " + std::to_string(e.abi) + ", build '" + (e.build_id ? e.build_id : "") +
         "', entry " + std::to_string(e.entry_size) + " B, RunRequest " +
         std::to_string(e.request_size) + " B, RunResult " + std::to_string(e.result_size) +
         " B, CudaAvailability " + std::to_string(e.availability_size) + " B";
}

bool same_build(const CudaModuleEntry& a, const CudaModuleEntry& b) {
  return a.abi == b.abi && a.entry_size == b.entry_size && a.build_id &&
         std::string(a.build_id) == b.build_id && a.request_size == b.request_size &&
         a.result_size == b.result_size && a.availability_size == b.availability_size;
}

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "(no dlerror text)";
}

// Loads the module; on failure, *error says why and what to do.
const CudaModuleEntry* load(std::string* error) {
  const char* from_env = std::getenv(kCudaModuleEnv);
  const bool env_set = from_env && *from_env;
  std::string where;
  try {
    where = cuda_module_path();
  } catch (const CudaModuleError& e) {
    *error = e.what();
    return nullptr;
  }
  const std::string named =
      "the CUDA module " + where + (env_set ? std::string(" ($") + kCudaModuleEnv + ")" : "");
  if (access(where.c_str(), F_OK) != 0) {
    if (env_set)
      *error = named + " does not exist: point " + kCudaModuleEnv + " at the " + kCudaModuleFile +
               " built with this shardscope, or unset it to load the one beside the executable";
    else
      *error = named +
               " does not exist: GPU commands (run --backend cuda) load it from beside the "
               "shardscope executable, where CUDA builds write it: build the shardscope_cuda "
               "target, copy the " +
               kCudaModuleFile + " of this build there, or set " + kCudaModuleEnv + " to its path";
    return nullptr;
  }
  // RTLD_NOW: a missing symbol or library is an error here, not a crash later.
  // RTLD_LOCAL: the module's copies of shardscope's code stay its own.
  void* handle = dlopen(where.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    *error = "cannot load " + named + ": " + dl_error() +
             ". The module links the CUDA libraries (cuBLASLt, NCCL, CUPTI): make them "
             "findable (LD_LIBRARY_PATH with the CUDA toolkit's lib64 and "
             "extras/CUPTI/lib64; `ldd " +
             where + "` lists what is missing)";
    return nullptr;
  }
  dlerror();
  void* symbol = dlsym(handle, kCudaModuleSymbol);
  if (!symbol) {
    *error = where + " is not a shardscope CUDA module: " + dl_error();
    return nullptr;
  }
  using Factory = const CudaModuleEntry* (*)();
  const CudaModuleEntry* entry = reinterpret_cast<Factory>(symbol)();
  const CudaModuleEntry expected = expected_entry();
  const std::string use_ours =
      std::string("): use the ") + kCudaModuleFile + " built with this executable";
  if (!entry) {
    *error = where + ": " + kCudaModuleSymbol + "() returned no entry";
    return nullptr;
  }
  // abi and entry_size are the first fields of every ABI version; the others
  // are read only when these agree.
  if (entry->abi != expected.abi || entry->entry_size != expected.entry_size) {
    *error = where + " is the CUDA module of another shardscope build (module ABI " +
             std::to_string(entry->abi) + ", entry " + std::to_string(entry->entry_size) +
             " B; this shardscope: ABI " + std::to_string(expected.abi) + ", entry " +
             std::to_string(expected.entry_size) + " B" + use_ours;
    return nullptr;
  }
  if (!same_build(*entry, expected)) {
    *error = where +
             " is the CUDA module of another shardscope build (module: " + describe(*entry) +
             "; this shardscope: " + describe(expected) + use_ours;
    return nullptr;
  }
  if (!entry->query || !entry->run) {
    *error = where + ": the CUDA module's entry has no query or run function";
    return nullptr;
  }
  return entry;
}

}  // namespace

std::string cuda_module_path() {
  const char* from_env = std::getenv(kCudaModuleEnv);
  if (from_env && *from_env) return from_env;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0)
    throw CudaModuleError(std::string("cannot find this executable (/proc/self/exe), beside "
                                      "which the CUDA module is; set ") +
                          kCudaModuleEnv + " to the module's path");
  std::string exe(self, static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return (slash == std::string::npos ? std::string(".") : exe.substr(0, slash)) + "/" +
         kCudaModuleFile;
}

const CudaModuleEntry& cuda_module() {
  // Loaded once; a failure is kept and thrown on every call.
  static std::string error;
  static const CudaModuleEntry* const entry = load(&error);
  if (!entry) throw CudaModuleError(error);
  return *entry;
}

}  // namespace shardscope::engine
