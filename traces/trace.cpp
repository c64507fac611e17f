#include "traces/trace.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "traces/error.h"

namespace shardscope::traces {

namespace {

const char* const kCategoryNames[kCategoryCount] = {"compute",
                                                    "comm.all_gather",
                                                    "comm.reduce_scatter",
                                                    "comm.all_reduce",
                                                    "comm.other",
                                                    "memcpy.h2d",
                                                    "memcpy.d2h",
                                                    "memcpy.d2d",
                                                    "memset",
                                                    "sync",
                                                    "marker",
                                                    "host"};
const char* const kLaneKindNames[kLaneKindCount] = {"host", "compute", "comm", "copy", "other"};
const char* const kSourceNames[kSourceCount] = {"unknown",     "simulator", "engine-cpu",
                                                "engine-cuda", "kineto",    "memory-snapshot"};
const char* const kMemoryCategoryNames[kMemoryCategoryCount] = {
    "unknown",     "parameters",   "gradients",   "optimizer_state",
    "activations", "comm_buffers", "temporaries", "other"};

template <typename Enum, int N>
bool parse_enum(std::string_view name, const char* const (&names)[N], Enum* out) {
  for (int i = 0; i < N; ++i) {
    if (name == names[i]) {
      *out = static_cast<Enum>(i);
      return true;
    }
  }
  return false;
}

std::string path_of(size_t rank_index, const char* array, size_t index, const char* field) {
  std::string p = "/ranks/" + std::to_string(rank_index);
  if (array) {
    p += "/";
    p += array;
    p += "/" + std::to_string(index);
  }
  if (field) {
    p += "/";
    p += field;
  }
  return p;
}

}  // namespace

const char* category_name(Category c) {
  const auto i = static_cast<unsigned>(c);
  return i < kCategoryCount ? kCategoryNames[i] : "invalid";
}
bool parse_category(std::string_view name, Category* out) {
  return parse_enum(name, kCategoryNames, out);
}
const char* lane_kind_name(LaneKind k) {
  const auto i = static_cast<unsigned>(k);
  return i < kLaneKindCount ? kLaneKindNames[i] : "invalid";
}
bool parse_lane_kind(std::string_view name, LaneKind* out) {
  return parse_enum(name, kLaneKindNames, out);
}
const char* source_name(Source s) {
  const auto i = static_cast<unsigned>(s);
  return i < kSourceCount ? kSourceNames[i] : "invalid";
}
bool parse_source(std::string_view name, Source* out) {
  return parse_enum(name, kSourceNames, out);
}
const char* memory_category_name(MemoryCategory c) {
  const auto i = static_cast<unsigned>(c);
  return i < kMemoryCategoryCount ? kMemoryCategoryNames[i] : "invalid";
}
bool parse_memory_category(std::string_view name, MemoryCategory* out) {
  return parse_enum(name, kMemoryCategoryNames, out);
}

// ---- StringTable -------------------------------------------------------------

StringTable::StringTable() {
  intern("");
}

StringTable::StringTable(const StringTable& other)
    : strings_(other.strings_), bytes_(other.bytes_) {
  rebuild_index();
}

StringTable& StringTable::operator=(const StringTable& other) {
  if (this != &other) {
    strings_ = other.strings_;
    bytes_ = other.bytes_;
    rebuild_index();
  }
  return *this;
}

void StringTable::rebuild_index() {
  index_.clear();
  index_.reserve(strings_.size());
  for (size_t i = 0; i < strings_.size(); ++i)
    index_.emplace(std::string_view(strings_[i]), static_cast<uint32_t>(i));
}

uint32_t StringTable::intern(std::string_view s) {
  auto it = index_.find(s);
  if (it != index_.end()) return it->second;
  if (strings_.size() >= kNotFound) throw std::length_error("string table full");
  const auto id = static_cast<uint32_t>(strings_.size());
  strings_.emplace_back(s);
  bytes_ += s.size();
  index_.emplace(std::string_view(strings_.back()), id);
  return id;
}

uint32_t StringTable::find(std::string_view s) const {
  auto it = index_.find(s);
  return it == index_.end() ? kNotFound : it->second;
}

// ---- Trace -------------------------------------------------------------------

RankTrace& Trace::add_rank(int32_t rank) {
  if (find_rank(rank)) throw std::invalid_argument("rank " + std::to_string(rank) + " added twice");
  ranks.emplace_back();
  ranks.back().rank = rank;
  return ranks.back();
}

RankTrace* Trace::find_rank(int32_t rank) {
  for (RankTrace& r : ranks)
    if (r.rank == rank) return &r;
  return nullptr;
}

const RankTrace* Trace::find_rank(int32_t rank) const {
  for (const RankTrace& r : ranks)
    if (r.rank == rank) return &r;
  return nullptr;
}

uint32_t Trace::add_lane(RankTrace& r, std::string_view name, LaneKind kind, int32_t stream) {
  const uint32_t id = intern(name);
  for (size_t i = 0; i < r.lanes.size(); ++i)
    if (r.lanes[i].name == id) return static_cast<uint32_t>(i);
  r.lanes.push_back(Lane{id, kind, stream});
  return static_cast<uint32_t>(r.lanes.size() - 1);
}

size_t Trace::event_count() const {
  size_t n = 0;
  for (const RankTrace& r : ranks) n += r.events.size();
  return n;
}

int32_t Trace::world_size() const {
  if (meta.world_size > 0) return meta.world_size;
  size_t n = 0;
  for (const RankTrace& r : ranks) n += r.represents.empty() ? 1 : r.represents.size();
  return static_cast<int32_t>(n);
}

bool is_launch_flow(const RankTrace& r, const Flow& f) {
  if (f.from >= r.events.size() || f.to >= r.events.size()) return false;
  const Event& from = r.events[f.from];
  const Event& to = r.events[f.to];
  if (from.lane >= r.lanes.size() || to.lane >= r.lanes.size()) return false;
  return r.lanes[from.lane].kind == LaneKind::host && r.lanes[to.lane].kind != LaneKind::host &&
         from.correlation != 0 && from.correlation == to.correlation;
}

Event& add_event(RankTrace& r, uint32_t lane, uint32_t name, Category category, int64_t start_ns,
                 int64_t dur_ns) {
  Event e;
  e.start_ns = start_ns;
  e.dur_ns = dur_ns;
  e.name = name;
  e.lane = lane;
  e.category = category;
  r.events.push_back(e);
  return r.events.back();
}

MemoryEvent& add_allocation(RankTrace& r, int64_t time_ns, int64_t bytes, uint64_t address,
                            uint32_t lane, MemoryCategory category, int64_t reserved) {
  MemoryEvent m;
  m.time_ns = time_ns;
  m.bytes = bytes;
  m.allocated = (r.memory.empty() ? 0 : r.memory.back().allocated) + bytes;
  m.reserved = reserved;
  m.address = address;
  m.lane = lane;
  m.category = category;
  r.memory.push_back(m);
  return r.memory.back();
}

void sort_events(RankTrace& r) {
  std::vector<uint32_t> order(r.events.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const Event& x = r.events[a];
    const Event& y = r.events[b];
    if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
    if (x.lane != y.lane) return x.lane < y.lane;
    return x.dur_ns > y.dur_ns;
  });
  std::vector<uint32_t> new_index(order.size());
  std::vector<Event> sorted(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    sorted[i] = r.events[order[i]];
    new_index[order[i]] = static_cast<uint32_t>(i);
  }
  r.events.swap(sorted);
  for (Flow& f : r.flows) {
    if (f.from < new_index.size()) f.from = new_index[f.from];
    if (f.to < new_index.size()) f.to = new_index[f.to];
  }
  std::stable_sort(
      r.memory.begin(), r.memory.end(),
      [](const MemoryEvent& a, const MemoryEvent& b) { return a.time_ns < b.time_ns; });
  std::stable_sort(r.steps.begin(), r.steps.end(),
                   [](const Step& a, const Step& b) { return a.start_ns < b.start_ns; });
}

void validate(const Trace& t, const std::string& file) {
  auto fail = [&](const std::string& where, const std::string& what) {
    throw TraceError(ErrorKind::schema, file, where, what);
  };
  const uint32_t nstrings = t.strings.size();
  if (t.meta.world_size < 0) fail("/metadata/world_size", "negative world size");
  for (size_t ri = 0; ri < t.ranks.size(); ++ri) {
    const RankTrace& r = t.ranks[ri];
    for (size_t rj = 0; rj < ri; ++rj)
      if (t.ranks[rj].rank == r.rank)
        fail(path_of(ri, nullptr, 0, "rank"), "rank " + std::to_string(r.rank) + " appears twice");
    if (r.rank < 0) fail(path_of(ri, nullptr, 0, "rank"), "negative rank");
    for (size_t i = 0; i < r.represents.size(); ++i)
      if (r.represents[i] < 0) fail(path_of(ri, "represents", i, nullptr), "negative rank");
    for (size_t i = 0; i < r.lanes.size(); ++i) {
      const Lane& l = r.lanes[i];
      if (l.name >= nstrings) fail(path_of(ri, "lanes", i, "name"), "string id out of range");
      if (static_cast<unsigned>(l.kind) >= kLaneKindCount)
        fail(path_of(ri, "lanes", i, "kind"), "unknown lane kind");
    }
    const auto nlanes = static_cast<uint32_t>(r.lanes.size());
    for (size_t i = 0; i < r.events.size(); ++i) {
      const Event& e = r.events[i];
      if (e.lane >= nlanes)
        fail(path_of(ri, "events", i, "lane"), "lane " + std::to_string(e.lane) +
                                                   " out of range (rank has " +
                                                   std::to_string(nlanes) + " lanes)");
      if (e.name >= nstrings || e.unit >= nstrings || e.op >= nstrings)
        fail(path_of(ri, "events", i, "name"), "string id out of range");
      if (static_cast<unsigned>(e.category) >= kCategoryCount)
        fail(path_of(ri, "events", i, "cat"), "unknown category");
      if (e.dur_ns < 0) fail(path_of(ri, "events", i, "dur_ns"), "negative duration");
      if (e.start_ns > std::numeric_limits<int64_t>::max() - e.dur_ns)
        fail(path_of(ri, "events", i, "dur_ns"), "start + duration overflows");
      if (e.reserved[0] | e.reserved[1] | e.reserved[2])
        fail(path_of(ri, "events", i, nullptr), "reserved bytes must be zero");
    }
    for (size_t i = 0; i < r.memory.size(); ++i) {
      const MemoryEvent& m = r.memory[i];
      if (m.lane != kNoLane && m.lane >= nlanes)
        fail(path_of(ri, "memory", i, "lane"), "lane out of range");
      if (static_cast<unsigned>(m.category) >= kMemoryCategoryCount)
        fail(path_of(ri, "memory", i, "cat"), "unknown memory category");
      if (m.reserved_pad[0] | m.reserved_pad[1] | m.reserved_pad[2])
        fail(path_of(ri, "memory", i, nullptr), "reserved bytes must be zero");
      if (i > 0 && m.time_ns < r.memory[i - 1].time_ns)
        fail(path_of(ri, "memory", i, "t_ns"), "memory events out of time order");
    }
    for (size_t i = 0; i < r.flows.size(); ++i) {
      const Flow& f = r.flows[i];
      if (f.from >= r.events.size()) fail(path_of(ri, "flows", i, "from"), "event out of range");
      if (f.to >= r.events.size()) fail(path_of(ri, "flows", i, "to"), "event out of range");
    }
    for (size_t i = 0; i < r.steps.size(); ++i) {
      const Step& s = r.steps[i];
      if (s.end_ns < s.start_ns)
        fail(path_of(ri, "steps", i, "end_ns"), "step ends before it starts");
      if (i > 0 && s.start_ns <= r.steps[i - 1].start_ns)
        fail(path_of(ri, "steps", i, "start_ns"), "steps must start in increasing order");
    }
  }
}

// ---- equality ------------------------------------------------------------------

namespace {

bool same_string(const Trace& a, uint32_t ia, const Trace& b, uint32_t ib) {
  return a.strings.get(ia) == b.strings.get(ib);
}

bool same_rank(const Trace& ta, const RankTrace& a, const Trace& tb, const RankTrace& b) {
  if (a.rank != b.rank || a.device != b.device || a.clock_offset_ns != b.clock_offset_ns ||
      a.represents != b.represents)
    return false;
  if (a.lanes.size() != b.lanes.size() || a.events.size() != b.events.size() ||
      a.memory.size() != b.memory.size() || a.flows.size() != b.flows.size() ||
      a.steps.size() != b.steps.size())
    return false;
  for (size_t i = 0; i < a.lanes.size(); ++i) {
    const Lane& x = a.lanes[i];
    const Lane& y = b.lanes[i];
    if (x.kind != y.kind || x.stream != y.stream || !same_string(ta, x.name, tb, y.name))
      return false;
  }
  for (size_t i = 0; i < a.events.size(); ++i) {
    const Event& x = a.events[i];
    const Event& y = b.events[i];
    if (x.start_ns != y.start_ns || x.dur_ns != y.dur_ns || x.bytes != y.bytes ||
        x.flops != y.flops || x.correlation != y.correlation || x.lane != y.lane ||
        x.category != y.category || !same_string(ta, x.name, tb, y.name) ||
        !same_string(ta, x.unit, tb, y.unit) || !same_string(ta, x.op, tb, y.op))
      return false;
  }
  for (size_t i = 0; i < a.memory.size(); ++i) {
    const MemoryEvent& x = a.memory[i];
    const MemoryEvent& y = b.memory[i];
    if (x.time_ns != y.time_ns || x.bytes != y.bytes || x.allocated != y.allocated ||
        x.reserved != y.reserved || x.address != y.address || x.lane != y.lane ||
        x.category != y.category)
      return false;
  }
  for (size_t i = 0; i < a.flows.size(); ++i)
    if (a.flows[i].from != b.flows[i].from || a.flows[i].to != b.flows[i].to) return false;
  for (size_t i = 0; i < a.steps.size(); ++i)
    if (a.steps[i].number != b.steps[i].number || a.steps[i].start_ns != b.steps[i].start_ns ||
        a.steps[i].end_ns != b.steps[i].end_ns)
      return false;
  return true;
}

}  // namespace

bool operator==(const Trace& a, const Trace& b) {
  const Metadata& x = a.meta;
  const Metadata& y = b.meta;
  if (x.source != y.source || x.model != y.model || x.policy_json != y.policy_json ||
      x.hardware != y.hardware || x.world_size != y.world_size ||
      x.tool_versions != y.tool_versions || x.clock_alignment != y.clock_alignment)
    return false;
  if (a.ranks.size() != b.ranks.size()) return false;
  for (size_t i = 0; i < a.ranks.size(); ++i)
    if (!same_rank(a, a.ranks[i], b, b.ranks[i])) return false;
  return true;
}

}  // namespace shardscope::traces
