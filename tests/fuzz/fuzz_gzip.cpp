// libFuzzer target: the gzip stream and the JSON guard in front of every
// JSON trace reader. Any input either decompresses (within a 64 MiB bound and
// the 256:1 ratio bound past 1 MiB) or throws TraceError; what decompresses
// goes through JsonGuard, chunk by chunk as load_trace feeds it, and to the
// Kineto importer. Property: what the importer accepts the guard accepts
// (the guard never refuses valid JSON within its limits).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "traces/error.h"
#include "traces/gzip.h"
#include "traces/json_guard.h"
#include "traces/kineto_import.h"

using namespace shardscope::traces;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string text;
  try {
    // Compressed bytes in chunks of 7 (members and headers split across them).
    size_t pos = 0;
    GunzipStream::Bounds bounds;
    bounds.max_bytes = uint64_t{64} << 20;
    bounds.max_ratio = 256;
    bounds.ratio_from = uint64_t{1} << 20;
    GunzipStream z(
        [&](char* buf, size_t cap) {
          const size_t n = std::min({cap, in.size() - pos, size_t{7}});
          std::memcpy(buf, in.data() + pos, n);
          pos += n;
          return n;
        },
        "fuzz.json.gz", bounds);
    char buf[4096];
    while (const size_t n = z.read(buf, sizeof buf)) text.append(buf, n);
  } catch (const TraceError&) {
    return 0;
  }
  bool guarded = true;
  try {
    JsonGuard g("fuzz.json", InputLimits{});
    for (size_t i = 0; i < text.size(); i += 13)
      g.feed(text.data() + i, std::min<size_t>(13, text.size() - i));
    g.finish();
  } catch (const TraceError&) {
    guarded = false;
  }
  try {
    import_kineto_text(text, "fuzz.json");
    if (!guarded) std::abort();  // the guard refused a trace the importer reads
  } catch (const TraceError&) {
  }
  return 0;
}
