// libFuzzer target: the Kineto (PyTorch profiler JSON) importer. Any input
// either imports or throws TraceError; what imports must compute metrics,
// round-trip through the binary form, and export to a Chrome trace that
// passes the checker (for traces spanning less than 9e18 ns, the checker's
// integer range).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "traces/binary_format.h"
#include "traces/chrome_check.h"
#include "traces/chrome_export.h"
#include "traces/error.h"
#include "traces/kineto_import.h"
#include "traces/metrics.h"

using namespace shardscope::traces;

namespace {

bool span_fits_checker(const Trace& t) {
  double lo = std::numeric_limits<double>::max(), hi = std::numeric_limits<double>::lowest();
  for (const RankTrace& r : t.ranks) {
    for (const Event& e : r.events) {
      lo = std::min(lo, static_cast<double>(e.start_ns));
      hi = std::max(hi, static_cast<double>(e.start_ns) + static_cast<double>(e.dur_ns));
    }
    for (const MemoryEvent& m : r.memory) {
      lo = std::min(lo, static_cast<double>(m.time_ns));
      hi = std::max(hi, static_cast<double>(m.time_ns));
    }
    for (const Step& s : r.steps) {
      lo = std::min(lo, static_cast<double>(s.start_ns));
      hi = std::max(hi, static_cast<double>(s.end_ns));
    }
  }
  return hi - lo < 8.9e18;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Trace t;
  try {
    t = import_kineto_text(std::string_view(reinterpret_cast<const char*>(data), size),
                           "fuzz.json");
  } catch (const TraceError&) {
    return 0;
  }
  (void)compute_metrics(t);
  const std::string bin = trace_to_binary(t);
  if (read_trace_binary(bin.data(), bin.size()) != t) std::abort();
  if (span_fits_checker(t)) {
    const auto issues = check_chrome_trace(chrome_trace_string(t));
    if (!issues.empty()) {
      std::fprintf(stderr, "%s", format_chrome_issues(issues).c_str());
      std::abort();
    }
  }
  return 0;
}
