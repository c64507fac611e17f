// How events appear in Chrome/Kineto exports: Kineto's category and a name
// tools recognise (NCCL kernel names, "Memcpy HtoD (...)"). Internal to
// chrome_export.cpp; the mapping is documented in docs/traces.md.
#pragma once

#include <string>
#include <string_view>

#include "traces/trace.h"

namespace shardscope::traces {

struct KinetoShown {
  const char* cat;   // "kernel", "gpu_memcpy", "cpu_op", ...
  std::string name;  // as shown
  bool renamed;      // name differs from the event's (the original goes to args)
};

// `device`: the event is on a device lane (not the host). `op`: the event's
// op string; for host events imported from Kineto it holds their Kineto
// category (cpu_op, user_annotation, cuda_runtime, cuda_driver,
// mtia_runtime), which the export keeps.
KinetoShown kineto_shown_as(const Event& e, std::string_view name, std::string_view op,
                            bool device);

}  // namespace shardscope::traces
