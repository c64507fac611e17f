// Reader of nccl-tests output (NVIDIA/nccl-tests: all_gather_perf,
// reduce_scatter_perf, all_reduce_perf ... stdout saved to a text file), for
// `shardscope calibrate`. An untrusted-file reader: malformed input throws
// sim::Error naming the file and line, never anything else.
//
// What it reads (docs/calibration.md has a sample):
//   # nccl-tests version 2.13.8 nccl-headers=21903 nccl-library=21903   starts a test
//   # Collective test starting: all_gather_perf                          which collective
//   # nThread 1 nGpus 1 minBytes 1024 maxBytes 1073741824 ...            (ignored)
//   #  Rank  0 Group  0 Pid 1234 on host1 device  0 [0x18] NVIDIA ...   one line per rank
//   #       size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw ...
//          1024     16  float   none    -1  12.34   0.08   0.07      0  12.10  ...
//   # Collective test concluded: all_gather_perf                         ends the test
// Columns are found by their names in the header line (so versions with or
// without the redop/root columns, "time" or "cputime", and extra per-iteration
// columns all read); the first time/algbw/busbw columns are the out-of-place
// figures. A row is a line whose first token is all digits (the size): it
// must have exactly the header's number of columns and numeric size, time,
// algbw and busbw. Other lines not starting with '#' (NCCL INFO logs, even
// from hosts named "10-0-0-7", timestamps, MPI messages) are ignored. A file may hold several tests
// one after the other.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/hardware.h"  // sim::Error

namespace shardscope::sim {

enum class NcclCollective : uint8_t { unknown, all_gather, reduce_scatter, all_reduce, other };

/// "unknown", "all_gather", "reduce_scatter", "all_reduce", "other".
const char* nccl_collective_name(NcclCollective c);
/// "all_gather", "all_gather_perf", "all_gather_perf_mpi" (and the same for
/// reduce_scatter, all_reduce) -> that collective; false for anything else.
bool parse_nccl_collective(std::string_view name, NcclCollective* out);

struct NcclTestsRow {
  int64_t line = 0;       ///< 1-based line in the file
  int64_t bytes = 0;      ///< "size" column: S, the full buffer in bytes
  int64_t count = 0;      ///< "count" column (elements), 0 when absent
  double time_us = 0;     ///< out-of-place time (microseconds)
  double algbw_gbps = 0;  ///< out-of-place algorithm bandwidth (GB/s), 0 when absent
  double busbw_gbps = 0;  ///< out-of-place bus bandwidth (GB/s), 0 when absent
};

struct NcclTestsTable {
  std::string file;
  int64_t line = 0;  ///< line of the column header
  NcclCollective collective = NcclCollective::unknown;
  std::string test;   ///< the test as the file names it ("all_gather_perf"); "" when it does not
  int64_t ranks = 0;  ///< "#  Rank" lines
  int64_t nodes = 0;  ///< distinct hosts among them
  int64_t min_per_node = 0, max_per_node = 0;  ///< fewest / most ranks on one host
  std::vector<NcclTestsRow> rows;
  bool multi_node() const { return nodes > 1; }
};

/// Every test of the text with at least one row. `kind` (not unknown) names
/// the collective of tests the text does not name, and must agree with those
/// it does. Throws Error "FILE:LINE: ..." on malformed input, a test whose
/// collective stays unknown, a test without rank lines, or no table at all.
std::vector<NcclTestsTable> parse_nccl_tests(std::string_view text, const std::string& file,
                                             NcclCollective kind = NcclCollective::unknown);
/// Reads `path` (Error when unreadable) and parses it.
std::vector<NcclTestsTable> load_nccl_tests(const std::string& path,
                                            NcclCollective kind = NcclCollective::unknown);

}  // namespace shardscope::sim
