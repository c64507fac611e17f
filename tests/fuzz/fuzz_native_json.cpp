// libFuzzer target: the native JSON reader. Any input either loads or throws
// TraceError; what loads must survive write -> read unchanged, and its
// metrics must compute.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "traces/error.h"
#include "traces/json_format.h"
#include "traces/metrics.h"

using namespace shardscope::traces;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Trace t;
  try {
    t = read_trace_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const TraceError&) {
    return 0;
  }
  if (read_trace_json(trace_to_json(t)) != t) std::abort();
  (void)compute_metrics(t);
  return 0;
}
