// libFuzzer target: the native JSON reader. Any input either loads or throws
// TraceError; what loads must survive write -> read unchanged, and its
// metrics must compute. And what loads, JsonGuard (which load_trace runs on
// the text as it reads it) must accept.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "traces/error.h"
#include "traces/json_format.h"
#include "traces/json_guard.h"
#include "traces/metrics.h"

using namespace shardscope::traces;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Trace t;
  try {
    t = read_trace_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const TraceError&) {
    return 0;
  }
  // (nlohmann skips a UTF-8 byte order mark; load_trace refuses one, as
  // the Kineto scanner does.)
  const bool bom = size >= 3 && data[0] == 0xef && data[1] == 0xbb && data[2] == 0xbf;
  if (!bom) try {
      JsonGuard g("fuzz.json", InputLimits{});
      g.feed(reinterpret_cast<const char*>(data), size);
      g.finish();
    } catch (const TraceError&) {
      std::abort();  // the guard refused a trace the reader reads
    }
  if (read_trace_json(trace_to_json(t)) != t) std::abort();
  (void)compute_metrics(t);
  return 0;
}
