#include "traces/merge.h"

#include <vector>

namespace shardscope::traces {

void merge_ranks(Trace& into, const Trace& from, int64_t clock_offset_ns) {
  std::vector<uint32_t> id(from.strings.size());
  for (uint32_t i = 0; i < from.strings.size(); ++i) id[i] = into.intern(from.strings.get(i));
  for (const RankTrace& src : from.ranks) {
    RankTrace& r = into.add_rank(src.rank);
    r.device = src.device;
    r.clock_offset_ns = src.clock_offset_ns + clock_offset_ns;
    r.represents = src.represents;
    r.lanes = src.lanes;
    for (Lane& l : r.lanes) l.name = id[l.name];
    r.events = src.events;
    for (Event& e : r.events) {
      e.start_ns += clock_offset_ns;
      e.name = id[e.name];
      e.unit = id[e.unit];
      e.op = id[e.op];
    }
    r.memory = src.memory;
    for (MemoryEvent& m : r.memory) m.time_ns += clock_offset_ns;
    r.flows = src.flows;
    r.steps = src.steps;
    for (Step& s : r.steps) {
      s.start_ns += clock_offset_ns;
      s.end_ns += clock_offset_ns;
    }
  }
}

}  // namespace shardscope::traces
