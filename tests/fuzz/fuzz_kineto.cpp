// libFuzzer target: the Kineto (PyTorch profiler JSON) importer. Any input
// either imports or throws TraceError; the streamed import (the text handed
// over in small chunks) must give the same trace or the same error; what
// imports must compute metrics, round-trip through the binary form, and
// export to a Chrome trace that passes the checker (for traces spanning
// less than 9e18 ns, the checker's integer range).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
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

// The text `size` % 13 + 1 bytes per chunk: the trace, or the error's message.
std::string streamed(const std::string& text, Trace* out) {
  const size_t k = text.size() % 13 + 1;
  size_t at = 0;
  try {
    *out = import_kineto_source(
        [&](std::string& buf, size_t n) {
          const size_t m = std::min({n, k, text.size() - at});
          buf.append(text, at, m);
          at += m;
          return m;
        },
        {}, "fuzz.json");
  } catch (const TraceError& e) {
    return e.what();
  }
  return {};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Trace t, s;
  const std::string stream_error = streamed(text, &s);
  try {
    t = import_kineto_text(text, "fuzz.json");
  } catch (const TraceError& e) {
    if (stream_error != e.what()) {
      std::fprintf(stderr, "whole: %s\nstreamed: %s\n", e.what(), stream_error.c_str());
      std::abort();
    }
    return 0;
  }
  if (!stream_error.empty() || !(s == t)) {
    std::fprintf(stderr, "whole text imported; streamed: %s\n",
                 stream_error.empty() ? "a different trace" : stream_error.c_str());
    std::abort();
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
