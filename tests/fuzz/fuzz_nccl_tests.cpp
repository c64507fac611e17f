// libFuzzer target: the nccl-tests output reader (sim/nccl_tests.h). Any input
// either parses or throws sim::Error; what parses must satisfy the reader's
// promises: every table has rows, a known collective, ranks spread over
// 1..ranks hosts, and finite non-negative sizes and times.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "sim/nccl_tests.h"

using namespace shardscope::sim;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<NcclTestsTable> tables;
  try {
    tables =
        parse_nccl_tests(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.txt");
  } catch (const Error&) {
    return 0;
  }
  if (tables.empty()) std::abort();
  for (const NcclTestsTable& t : tables) {
    if (t.rows.empty() || t.collective == NcclCollective::unknown) std::abort();
    if (t.ranks < 1 || t.nodes < 1 || t.nodes > t.ranks) std::abort();
    if (t.min_per_node < 1 || t.min_per_node > t.max_per_node || t.max_per_node > t.ranks)
      std::abort();
    for (const NcclTestsRow& r : t.rows) {
      if (r.bytes < 0 || r.line < 1) std::abort();
      if (!std::isfinite(r.time_us) || r.time_us < 0) std::abort();
      if (!std::isfinite(r.algbw_gbps) || !std::isfinite(r.busbw_gbps)) std::abort();
    }
  }
  return 0;
}
