// libFuzzer target: the binary reader. Any input either loads or throws
// TraceError, without allocating more than the input could describe; what
// loads must survive write -> read unchanged, and its metrics must compute.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "traces/binary_format.h"
#include "traces/error.h"
#include "traces/metrics.h"

using namespace shardscope::traces;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Trace t;
  try {
    t = read_trace_binary(data, size, "fuzz.bin");
  } catch (const TraceError&) {
    return 0;
  }
  const std::string again = trace_to_binary(t);
  if (read_trace_binary(again.data(), again.size()) != t) std::abort();
  (void)compute_metrics(t);
  return 0;
}
