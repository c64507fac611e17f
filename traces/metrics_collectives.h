// Collectives matched across the ranks of a trace: when each rank arrived,
// how long the early ranks waited for the last one, and what the slowest
// rank was doing before it arrived (docs/traces.md, "Wait and transfer").
//
// A collective can only be split when the trace holds every rank of its
// group. Events carry no process-group id, so the group is taken to be every
// rank of the trace, and the split is made only when the trace holds the
// whole world (as many ranks as metadata.world_size, none standing for
// others). Collectives are matched by name and category, in order of start:
// the k-th "all_gather h.3" of every rank is one collective. A name whose
// count differs between ranks is left unsplit (counted in `unmatched`).
//
// For a matched collective with last arrival L, rank r's event [s, e) is
//   wait      [s, min(L, e))   (waiting for the last rank to arrive)
//   transfer  [max(L, s), e)   (moving the data, once every rank is there)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "traces/trace.h"

namespace shardscope::traces {

struct CollectiveArrival {
  int32_t rank = 0;
  uint32_t event = 0;  // index into that rank's events
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// What a rank was doing just before it arrived at a collective: the event
// (not a collective, sync or marker) whose end, clipped to the arrival, is
// latest; among ties the one that started last (the innermost).
struct ArrivalActivity {
  bool found = false;
  std::string name;
  Category category = Category::compute;
  int64_t gap_ns = 0;  // arrival - its end; 0 when it was still running
};

struct MatchedCollective {
  std::string name;
  Category category = Category::comm_other;
  // The step (number) the first-listed rank's event starts in; 0 without steps.
  int64_t step = 0;
  int64_t first_arrival_ns = 0;
  int64_t last_arrival_ns = 0;  // where the transfer starts
  int32_t slowest_rank = 0;     // the last to arrive (lowest rank among ties)
  ArrivalActivity slowest_doing;
  std::vector<CollectiveArrival> arrivals;  // one per rank, by rank
  int64_t skew_ns() const { return last_arrival_ns - first_arrival_ns; }
};

struct CollectiveMatch {
  bool split = false;  // the trace holds every rank, so collectives are matched
  std::string reason;  // why not, when !split and the trace has collectives
  std::vector<MatchedCollective> collectives;  // by first arrival
  int64_t unmatched = 0;                       // collective events left unsplit
  // Per rank, per event index: where the event's transfer starts (the last
  // arrival of its collective, or its own start when unmatched / not a
  // collective). Empty when !split.
  std::map<int32_t, std::vector<int64_t>> transfer_start;
};

CollectiveMatch match_collectives(const Trace& t);

// {"split", "reason", "unmatched", "collectives": [{"step", "name", "category",
//  "skew_ms", "slowest_rank", "slowest_doing": {"name", "category", "gap_ms"} | null,
//  "arrivals": [{"rank", "offset_ms", "wait_ms", "transfer_ms"}]}]}; offsets from the
// first arrival. At most `limit` collectives (-1 = all), largest skew first.
nlohmann::json collectives_to_json(const CollectiveMatch& m, int limit = -1);
// Per step: each rank's wait at collectives and how often it was the
// slowest, then the `per_step` collectives of largest skew with the slowest
// rank and what it was doing (`report --ranks`).
std::string format_collectives(const CollectiveMatch& m, int per_step = 5);

}  // namespace shardscope::traces
