// A MemorySnapshot to a rank's memory records (docs/traces.md, "Memory
// snapshots"). The snapshot holds the allocator's state at its end (the
// segments) and the actions before it (the device trace); the counters
// before the first action are worked back from the end, as MemoryViz.js
// does when it draws the state at an earlier entry.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "traces/error.h"
#include "traces/memory_snapshot.h"

namespace shardscope::traces {

namespace {

// CUDACachingAllocator's round_size with its default configuration (512 B
// multiples, at least 512 B): the block a request gets, unless a large-pool
// block is handed out whole (a remainder of 1 MiB or less is not split).
uint64_t block_bytes(uint64_t requested) {
  constexpr uint64_t kMinBlock = 512;
  if (requested < kMinBlock) return kMinBlock;
  return kMinBlock * ((requested + kMinBlock - 1) / kMinBlock);
}

bool is_segment_grow(const std::string& action) {
  return action == "segment_alloc" || action == "segment_map";
}
bool is_segment_shrink(const std::string& action) {
  return action == "segment_free" || action == "segment_unmap";
}

int64_t checked(uint64_t v, const std::string& file, const std::string& path) {
  if (v > static_cast<uint64_t>(INT64_MAX / 4))
    throw TraceError(ErrorKind::schema, file, path, "a size over 2^61 bytes");
  return static_cast<int64_t>(v);
}

}  // namespace

void set_memory_from_snapshot(Trace& t, RankTrace& r, const MemorySnapshot& s,
                              const std::string& file, SnapshotImportSummary* summary) {
  SnapshotImportSummary sum;
  // The device: most trace entries, then most segments, then the lowest id.
  std::map<int64_t, std::pair<size_t, size_t>> devices;  // id -> (entries, segments)
  for (size_t d = 0; d < s.device_traces.size(); ++d)
    if (!s.device_traces[d].empty())
      devices[static_cast<int64_t>(d)].first = s.device_traces[d].size();
  for (const SnapshotSegment& seg : s.segments) ++devices[seg.device].second;
  if (devices.empty())
    throw TraceError(ErrorKind::schema, file, "/",
                     "the snapshot has no segments and no trace entries: nothing to import");
  int64_t device = devices.begin()->first;
  for (const auto& [id, counts] : devices)
    if (counts > devices[device]) device = id;
  if (device < 0 || device > INT32_MAX)
    throw TraceError(ErrorKind::schema, file, "/segments", "device " + std::to_string(device));
  sum.device = static_cast<int32_t>(device);
  for (const auto& [id, counts] : devices)
    if (id != device) sum.other_devices.push_back(static_cast<int32_t>(id));

  // The end state: bytes of allocated blocks and of segments; the size of
  // each block allocated at the end, by address.
  std::unordered_map<uint64_t, uint64_t> end_block;
  int64_t final_allocated = 0, final_reserved = 0;
  for (size_t i = 0; i < s.segments.size(); ++i) {
    const SnapshotSegment& seg = s.segments[i];
    if (seg.device != device) continue;
    ++sum.segments;
    const std::string p = "/segments/" + std::to_string(i);
    final_reserved += checked(seg.total_size, file, p + "/total_size");
    for (const SnapshotBlock& b : seg.blocks)
      if (b.state == "active_allocated") {
        final_allocated += checked(b.size, file, p + "/blocks");
        end_block[b.address] = b.size;
      }
  }

  static const std::vector<SnapshotEvent> kNone;
  const std::vector<SnapshotEvent>& trace = static_cast<size_t>(device) < s.device_traces.size()
                                                ? s.device_traces[static_cast<size_t>(device)]
                                                : kNone;
  const std::string tp = "/device_traces/" + std::to_string(device);
  // Block bytes of each alloc and free_requested: the block the segments
  // show for an allocation still live at the end, else the rounded request;
  // a free takes the bytes of the allocation it frees.
  std::vector<int64_t> bytes(trace.size(), 0);
  {
    std::vector<char> freed_later(trace.size(), 0);
    std::unordered_map<uint64_t, size_t> last_alloc;
    for (size_t i = 0; i < trace.size(); ++i) {
      if (trace[i].action == "alloc") last_alloc[trace[i].addr] = i;
      if (trace[i].action == "free_requested") {
        const auto it = last_alloc.find(trace[i].addr);
        if (it != last_alloc.end()) {
          freed_later[it->second] = 1;
          last_alloc.erase(it);
        }
      }
    }
    std::unordered_map<uint64_t, int64_t> live;
    for (size_t i = 0; i < trace.size(); ++i) {
      const SnapshotEvent& e = trace[i];
      const std::string p = tp + "/" + std::to_string(i) + "/size";
      if (e.action == "alloc") {
        const auto end = end_block.find(e.addr);
        const uint64_t b =
            !freed_later[i] && end != end_block.end() ? end->second : block_bytes(e.size);
        bytes[i] = checked(b, file, p);
        live[e.addr] = bytes[i];
      } else if (e.action == "free_requested") {
        const auto it = live.find(e.addr);
        bytes[i] = it != live.end() ? it->second : checked(block_bytes(e.size), file, p);
        if (it != live.end()) live.erase(it);
      } else if (is_segment_grow(e.action) || is_segment_shrink(e.action)) {
        bytes[i] = checked(e.size, file, p);
      }
    }
  }
  int64_t allocated = final_allocated, reserved = final_reserved;
  for (size_t i = 0; i < trace.size(); ++i) {
    const std::string& a = trace[i].action;
    if (a == "alloc") allocated -= bytes[i];
    if (a == "free_requested") allocated += bytes[i];
    if (is_segment_grow(a)) reserved -= bytes[i];
    if (is_segment_shrink(a)) reserved += bytes[i];
  }
  if (allocated < 0 || reserved < 0)
    throw TraceError(ErrorKind::schema, file, tp,
                     "the trace allocates more than the segments hold at the end (working back "
                     "from them leaves " +
                         std::to_string(allocated) + " bytes allocated and " +
                         std::to_string(reserved) +
                         " reserved before the first entry): the segments and the trace are "
                         "not of one allocator");
  sum.final_allocated = final_allocated;
  sum.final_reserved = final_reserved;
  sum.initial_allocated = allocated;
  sum.initial_reserved = reserved;

  r.memory.clear();
  if (r.device < 0) r.device = sum.device;
  std::map<int64_t, uint32_t> lanes;  // stream -> lane
  auto lane_of = [&](int64_t stream) {
    const auto it = lanes.find(stream);
    if (it != lanes.end()) return it->second;
    const int32_t id =
        stream >= INT32_MIN && stream <= INT32_MAX ? static_cast<int32_t>(stream) : -1;
    const uint32_t lane = t.add_lane(r, "allocator stream " + std::to_string(stream),
                                     stream == 0 ? LaneKind::compute : LaneKind::other, id);
    lanes[stream] = lane;
    return lane;
  };
  // Times: time_us x 1000, in recorded order; an entry without time_us, or
  // with one earlier than the previous entry's, takes the previous time.
  int64_t now = 0;
  for (const SnapshotEvent& e : trace)
    if (e.has_time && e.time_us > -INT64_MAX / 1000 && e.time_us < INT64_MAX / 1000) {
      now = e.time_us * 1000;
      break;
    }
  MemoryEvent start;
  start.time_ns = now;
  start.allocated = allocated;
  start.reserved = reserved;
  r.memory.push_back(start);
  for (size_t i = 0; i < trace.size(); ++i) {
    const SnapshotEvent& e = trace[i];
    ++sum.trace_entries;
    if (e.has_time) {
      if (e.time_us <= -INT64_MAX / 1000 || e.time_us >= INT64_MAX / 1000)
        throw TraceError(ErrorKind::schema, file, tp + "/" + std::to_string(i) + "/time_us",
                         "a time out of range (" + std::to_string(e.time_us) + " us)");
      now = std::max(now, e.time_us * 1000);
    }
    const std::string& a = e.action;
    if (a == "alloc" || a == "free_requested") {
      const int64_t b = a == "alloc" ? bytes[i] : -bytes[i];
      add_allocation(r, now, b, e.addr, lane_of(e.stream), MemoryCategory::unknown, reserved);
      ++(a == "alloc" ? sum.allocations : sum.frees);
    } else if (is_segment_grow(a) || is_segment_shrink(a)) {
      reserved += is_segment_grow(a) ? bytes[i] : -bytes[i];
      add_allocation(r, now, 0, e.addr, lane_of(e.stream), MemoryCategory::unknown, reserved);
      ++sum.segment_events;
    } else {
      ++sum.skipped;  // free_completed (active bytes, not kept), oom, snapshot, ...
    }
  }
  for (const SnapshotSegment& seg : s.segments)
    if (seg.device == device) lane_of(seg.stream);
  if (summary) *summary = sum;
}

void add_memory_snapshot_rank(Trace& t, const MemorySnapshot& s, int32_t rank,
                              const std::string& file, SnapshotImportSummary* summary) {
  // Checked before the rank is added, so a refused snapshot adds nothing.
  if (t.find_rank(rank))
    throw TraceError(ErrorKind::schema, file, "", "rank " + std::to_string(rank) + " twice");
  Trace scratch;
  RankTrace& r = scratch.add_rank(rank);
  set_memory_from_snapshot(scratch, r, s, file, summary);
  RankTrace& out = t.add_rank(rank);
  out.device = r.device;
  for (const Lane& l : r.lanes) t.add_lane(out, scratch.str(l.name), l.kind, l.stream);
  out.memory = std::move(r.memory);
}

Trace import_memory_snapshots(const std::vector<std::string>& paths,
                              std::vector<SnapshotImportSummary>* summaries,
                              const SnapshotLimits& limits) {
  Trace t;
  t.meta.source = Source::memory_snapshot;
  t.meta.clock_alignment = "none: the allocator's time_us, as recorded";
  for (size_t i = 0; i < paths.size(); ++i) {
    const MemorySnapshot s = load_memory_snapshot(paths[i], limits);
    SnapshotImportSummary sum;
    add_memory_snapshot_rank(t, s, static_cast<int32_t>(i), paths[i], &sum);
    if (summaries) summaries->push_back(sum);
  }
  t.meta.world_size = static_cast<int32_t>(paths.size());
  validate(t, paths.empty() ? "memory snapshot" : paths.front());
  return t;
}

}  // namespace shardscope::traces
