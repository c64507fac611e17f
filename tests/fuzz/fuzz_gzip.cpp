// libFuzzer target: the gzip reader in front of every trace reader. Any
// input either decompresses (within a 64 MiB bound) or throws TraceError;
// what decompresses is handed to the Kineto importer, which either imports
// or throws TraceError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "traces/error.h"
#include "traces/gzip.h"
#include "traces/kineto_import.h"

using namespace shardscope::traces;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  try {
    const std::string text = gunzip(in, "fuzz.json.gz", uint64_t{64} << 20);
    try {
      import_kineto_text(text, "fuzz.json");
    } catch (const TraceError&) {
    }
  } catch (const TraceError&) {
  }
  return 0;
}
