#include "sim/memory_history.h"

#include <map>
#include <string>
#include <unordered_map>

#include "alloc/policy.h"

namespace shardscope::sim {

namespace {

struct LiveBlock {
  uint64_t bytes = 0;
  uint64_t requested = 0;
  bool pending_free = false;  // freed, waiting for the ops that use it
  std::vector<traces::SnapshotFrame> frames;
};

struct LiveSegment {
  uint64_t bytes = 0;
  int64_t stream = 0;
  bool small = false;
  std::vector<traces::SnapshotFrame> frames;
};

}  // namespace

traces::MemorySnapshot memory_snapshot(const AllocatorHistory& history, const plan::Graph& graph,
                                       const plan::UnitPlan& units,
                                       const plan::Schedule& schedule) {
  // One frame per buffer, made once.
  std::vector<std::vector<traces::SnapshotFrame>> buffer_frames(schedule.buffers.size());
  auto frames_of = [&](int32_t buffer) -> const std::vector<traces::SnapshotFrame>& {
    static const std::vector<traces::SnapshotFrame> kNone;
    static const std::vector<traces::SnapshotFrame> kWorkspace = {traces::SnapshotFrame{
        "shardscope workspace", 0, "cuBLAS workspace (hardware blas_workspace_bytes)"}};
    if (buffer == AllocatorHistory::kBlasWorkspace) return kWorkspace;
    if (buffer < 0 || static_cast<size_t>(buffer) >= schedule.buffers.size()) return kNone;
    std::vector<traces::SnapshotFrame>& f = buffer_frames[static_cast<size_t>(buffer)];
    if (f.empty()) {
      const plan::Buffer& b = schedule.buffers[static_cast<size_t>(buffer)];
      traces::SnapshotFrame frame;
      frame.filename = std::string("shardscope ") + plan::buffer_category_name(b.category);
      frame.name = plan::buffer_name(graph, b);
      if (b.unit >= 0 && static_cast<size_t>(b.unit) < units.units.size())
        frame.name += " [unit " + units.units[static_cast<size_t>(b.unit)].name + "]";
      f.push_back(std::move(frame));
    }
    return f;
  };

  traces::MemorySnapshot snap;
  snap.device_traces.emplace_back();
  std::vector<traces::SnapshotEvent>& trace = snap.device_traces.front();
  trace.reserve(history.events.size());
  std::map<uint64_t, LiveSegment> segments;  // by base address
  std::unordered_map<uint64_t, LiveBlock> blocks;
  for (size_t i = 0; i < history.events.size(); ++i) {
    const alloc::AllocatorEvent& e = history.events[i];
    const int32_t buffer = i < history.buffers.size() ? history.buffers[i] : -1;
    traces::SnapshotEvent out;
    out.addr = e.address;
    out.stream = static_cast<int64_t>(e.stream);
    out.time_us = e.time_ns / 1000;
    switch (e.kind) {
      case alloc::EventKind::allocate: {
        out.action = "alloc";
        out.size = e.requested_bytes;
        out.frames = frames_of(buffer);
        blocks[e.address] = LiveBlock{e.bytes, e.requested_bytes, false, out.frames};
        break;
      }
      case alloc::EventKind::free: {
        out.action = "free_requested";
        out.size = e.requested_bytes;
        out.frames = frames_of(buffer);
        const auto it = blocks.find(e.address);
        if (it != blocks.end()) it->second.pending_free = true;
        break;
      }
      case alloc::EventKind::reusable: {
        out.action = "free_completed";
        out.size = e.requested_bytes;
        const auto it = blocks.find(e.address);
        if (it != blocks.end()) {
          out.frames = it->second.frames;
          blocks.erase(it);
        }
        break;
      }
      case alloc::EventKind::segment_alloc: {
        out.size = e.bytes;
        out.frames = frames_of(buffer);
        // The pool of the request that made it: small for blocks <= 1 MiB.
        bool small = e.bytes == alloc::kSmallBuffer;
        if (buffer >= 0 && static_cast<size_t>(buffer) < schedule.buffers.size())
          small = alloc::is_small_size(alloc::round_size(
              static_cast<uint64_t>(schedule.buffers[static_cast<size_t>(buffer)].bytes)));
        if (history.expandable_segments) {
          // Pages mapped at the end of the segment at e.segment_base
          // (PyTorch's SEGMENT_MAP): one snapshot segment per mapped range.
          out.action = "segment_map";
          auto it = segments.find(e.segment_base);
          if (it == segments.end())
            it = segments.emplace(e.segment_base, LiveSegment{0, out.stream, small, out.frames})
                     .first;
          it->second.bytes = e.address + e.bytes - e.segment_base;
          break;
        }
        out.action = "segment_alloc";
        segments[e.address] = LiveSegment{e.bytes, out.stream, small, out.frames};
        break;
      }
      case alloc::EventKind::segment_release: {
        out.size = e.bytes;
        out.frames = frames_of(buffer);
        if (history.expandable_segments) {
          // Pages unmapped at the segment's end: it now ends at e.address
          // (PyTorch's SEGMENT_UNMAP); a segment with none mapped is gone.
          out.action = "segment_unmap";
          const auto it = segments.find(e.segment_base);
          if (it != segments.end()) {
            it->second.bytes = e.address - e.segment_base;
            if (it->second.bytes == 0) segments.erase(it);
          }
          break;
        }
        out.action = "segment_free";
        segments.erase(e.address);
        break;
      }
      case alloc::EventKind::out_of_memory: {
        out.action = "oom";
        out.addr = 0;
        out.size = e.requested_bytes;
        const uint64_t reserved = e.counters.reserved.current;
        out.device_free = history.capacity_bytes > reserved ? history.capacity_bytes - reserved : 0;
        out.frames = frames_of(buffer);
        break;
      }
    }
    trace.push_back(std::move(out));
  }

  // The segments at the end, each tiled by its blocks: live ones as they
  // are, the gaps between them as inactive (cached) blocks.
  for (const auto& [base, seg] : segments) {
    traces::SnapshotSegment s;
    s.device = 0;
    s.address = base;
    s.total_size = seg.bytes;
    s.stream = seg.stream;
    s.segment_type = seg.small ? "small" : "large";
    s.is_expandable = history.expandable_segments;
    s.frames = seg.frames;
    std::map<uint64_t, const LiveBlock*> inside;
    for (const auto& [addr, b] : blocks)
      if (addr >= base && addr < base + seg.bytes) inside[addr] = &b;
    uint64_t at = base;
    auto gap = [&](uint64_t to) {
      if (to <= at) return;
      traces::SnapshotBlock free_block;
      free_block.address = at;
      free_block.size = to - at;
      free_block.requested_size = 0;
      free_block.state = "inactive";
      s.blocks.push_back(std::move(free_block));
    };
    for (const auto& [addr, b] : inside) {
      gap(addr);
      traces::SnapshotBlock block;
      block.address = addr;
      block.size = b->bytes;
      block.requested_size = b->requested;
      block.state = b->pending_free ? "active_pending_free" : "active_allocated";
      block.frames = b->frames;
      if (!b->pending_free) s.allocated_size += b->bytes;
      s.active_size += b->bytes;
      s.requested_size += b->requested;
      s.blocks.push_back(std::move(block));
      at = addr + b->bytes;
    }
    gap(base + seg.bytes);
    snap.segments.push_back(std::move(s));
  }
  return snap;
}

}  // namespace shardscope::sim
