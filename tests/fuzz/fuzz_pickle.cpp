// libFuzzer target: the plain-data pickle reader and the memory-snapshot
// reader and importer on top of it. Any input either reads or throws
// TraceError, within small limits (so the fuzzer also reaches them); what
// reads as a snapshot must import into a trace that validates and computes
// metrics, and must re-pickle (our writer) into bytes that read back to the
// same snapshot.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "traces/error.h"
#include "traces/memory_snapshot.h"
#include "traces/metrics.h"
#include "traces/pickle_read.h"

using namespace shardscope::traces;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  SnapshotLimits limits;
  limits.pickle.max_file_bytes = 1 << 20;
  limits.pickle.max_values = 1 << 16;
  limits.pickle.max_text_bytes = 1 << 20;
  limits.pickle.max_depth = 32;
  limits.pickle.max_marks = 64;
  limits.max_entries = 1 << 14;
  try {
    const pickle::Document doc = pickle::read_pickle(bytes, "fuzz.pickle", limits.pickle);
    if (doc.size() > limits.pickle.max_values) std::abort();  // the value budget holds
    const MemorySnapshot s = memory_snapshot_from_pickle(doc, "fuzz.pickle", limits);
    const std::string again = memory_snapshot_pickle(s);
    const MemorySnapshot back =
        memory_snapshot_from_pickle(pickle::read_pickle(again, "again"), "again", limits);
    if (memory_snapshot_pickle(back) != again) {
      std::fprintf(stderr, "a snapshot re-pickled reads back differently\n");
      std::abort();
    }
    Trace t;
    add_memory_snapshot_rank(t, s, 0, "fuzz.pickle");
    validate(t, "fuzz.pickle");
    (void)compute_metrics(t);
  } catch (const TraceError&) {
  }
  return 0;
}
