#include <dlfcn.h>

#include "profiler/cupti/cupti_internal.h"

namespace shardscope::profiler::detail {

std::string another_profiler_message(const std::string& detail) {
  return "another profiler (Nsight Systems, Nsight Compute, cuda-gdb, PyTorch profiler/Kineto, "
         "another shardscope recorder, ...) already uses CUPTI in this process; run without it "
         "or without shardscope's profiler (" +
         detail + ")";
}

bool cuda_driver_loadable(std::string* why) {
  // Already loaded (the usual case once CUDA is initialised): no side effect.
  if (void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD)) {
    dlclose(h);
    return true;
  }
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    if (why) *why = e ? e : "libcuda.so.1 not found";
    return false;
  }
  dlclose(h);
  return true;
}

std::string cupti_failure(CUptiResult result, const char* call) {
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || !text) text = "unknown CUPTI error";
  const std::string what = std::string(call) + " returned " + text;
  if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED || result == CUPTI_ERROR_DISABLED)
    return another_profiler_message(what);
  std::string why;
  if (!cuda_driver_loadable(&why))
    return "CUPTI found no CUDA driver (" + why +
           "): recording GPU activity needs the NVIDIA driver (" + what + ")";
  if (result == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
    return "CUPTI: insufficient privileges to profile this GPU (" + what + ")";
  return "CUPTI: " + what;
}

void check_cupti(CUptiResult result, const char* call) {
  if (result != CUPTI_SUCCESS) throw ProfilerError(cupti_failure(result, call));
}

}  // namespace shardscope::profiler::detail
