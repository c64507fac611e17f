// The keys written are those torch.cuda.memory._snapshot() returns (torch
// 2.x, c10/cuda/CUDACachingAllocator.h SegmentInfo / BlockInfo / TraceEntry
// as torch/csrc/cuda/memory_snapshot.cpp converts them) and
// torch/utils/viz/MemoryViz.js reads.
#include "io/output_file.h"
#include "traces/memory_snapshot.h"
#include "traces/pickle_write.h"

namespace shardscope::traces {

namespace {

void write_frames(pickle::Writer& w, const std::vector<SnapshotFrame>& frames) {
  w.begin_list();
  for (const SnapshotFrame& f : frames) {
    w.begin_dict();
    w.key("filename");
    w.str(f.filename);
    w.key("line");
    w.integer(f.line);
    w.key("name");
    w.str(f.name);
    w.end_dict();
  }
  w.end_list();
}

void write_u64(pickle::Writer& w, uint64_t v) {
  // Addresses and sizes below 2^63 (the allocator's are).
  w.integer(static_cast<int64_t>(v));
}

}  // namespace

std::string memory_snapshot_pickle(const MemorySnapshot& s) {
  pickle::Writer w;
  w.begin_dict();
  w.key("segments");
  w.begin_list();
  for (const SnapshotSegment& seg : s.segments) {
    w.begin_dict();
    w.key("device");
    w.integer(seg.device);
    w.key("address");
    write_u64(w, seg.address);
    w.key("total_size");
    write_u64(w, seg.total_size);
    w.key("allocated_size");
    write_u64(w, seg.allocated_size);
    w.key("active_size");
    write_u64(w, seg.active_size);
    w.key("requested_size");
    write_u64(w, seg.requested_size);
    w.key("stream");
    w.integer(seg.stream);
    w.key("segment_type");
    w.str(seg.segment_type);
    w.key("is_expandable");
    w.boolean(seg.is_expandable);
    w.key("frames");
    write_frames(w, seg.frames);
    w.key("blocks");
    w.begin_list();
    for (const SnapshotBlock& b : seg.blocks) {
      w.begin_dict();
      w.key("address");
      write_u64(w, b.address);
      w.key("size");
      write_u64(w, b.size);
      w.key("requested_size");
      write_u64(w, b.requested_size);
      w.key("state");
      w.str(b.state);
      w.key("frames");
      write_frames(w, b.frames);
      w.end_dict();
    }
    w.end_list();
    w.end_dict();
  }
  w.end_list();
  w.key("device_traces");
  w.begin_list();
  for (const std::vector<SnapshotEvent>& trace : s.device_traces) {
    w.begin_list();
    for (const SnapshotEvent& e : trace) {
      w.begin_dict();
      w.key("action");
      w.str(e.action);
      w.key("addr");
      write_u64(w, e.addr);
      w.key("size");
      write_u64(w, e.size);
      w.key("stream");
      w.integer(e.stream);
      if (e.has_time) {
        w.key("time_us");
        w.integer(e.time_us);
      }
      if (e.action == "oom") {
        w.key("device_free");
        write_u64(w, e.device_free);
      }
      w.key("frames");
      write_frames(w, e.frames);
      w.end_dict();
    }
    w.end_list();
  }
  w.end_list();
  w.end_dict();
  return w.finish();
}

void save_memory_snapshot(const MemorySnapshot& s, const std::string& path) {
  io::write_output_file(path, memory_snapshot_pickle(s));
}

}  // namespace shardscope::traces
