// PyTorch's CUDA caching-allocator snapshot (what
// torch.cuda.memory._snapshot() returns and _dump_snapshot pickles; what
// torch.cuda._memory_viz and pytorch.org/memory_viz read): the segments the
// allocator holds at the snapshot, with their blocks, and per device the
// trace of allocator actions recorded before it. docs/traces.md, "Memory
// snapshots", maps it to the trace model.
//
// Sizes in bytes; addresses as the allocator reports them; times in
// microseconds (time_us).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "traces/pickle_read.h"
#include "traces/trace.h"

namespace shardscope::traces {

// One stack frame ("filename:line:name" in memory_viz). shardscope writes a
// one-frame stack naming the buffer, its role and its unit.
struct SnapshotFrame {
  std::string filename;
  int64_t line = 0;
  std::string name;
};

struct SnapshotBlock {
  uint64_t address = 0;  // segment address + the sizes of the blocks before it
  uint64_t size = 0;     // block bytes (rounded, or the whole free block)
  uint64_t requested_size = 0;
  std::string state;  // "active_allocated", "active_pending_free", "inactive"
  std::vector<SnapshotFrame> frames;
};

struct SnapshotSegment {
  int64_t device = 0;
  uint64_t address = 0;
  uint64_t total_size = 0;
  int64_t stream = 0;
  std::string segment_type;     // "small" (2 MiB segments, blocks <= 1 MiB) or "large"
  uint64_t allocated_size = 0;  // active_allocated blocks
  uint64_t active_size = 0;     // active_allocated + active_pending_free blocks
  uint64_t requested_size = 0;  // requested bytes of the active blocks
  bool is_expandable = false;
  std::vector<SnapshotFrame> frames;  // of the allocation that made the segment
  std::vector<SnapshotBlock> blocks;  // in address order, tiling the segment
};

// One trace entry. `size` is the caller's requested bytes for alloc /
// free_requested / free_completed (as CUDACachingAllocator records them) and
// the segment bytes for segment_alloc / segment_free / segment_map /
// segment_unmap; for oom, the bytes asked for.
struct SnapshotEvent {
  std::string action;
  uint64_t addr = 0;
  uint64_t size = 0;
  int64_t stream = 0;
  int64_t time_us = 0;
  bool has_time = true;
  uint64_t device_free = 0;  // oom only
  std::vector<SnapshotFrame> frames;
};

struct MemorySnapshot {
  std::vector<SnapshotSegment> segments;
  std::vector<std::vector<SnapshotEvent>> device_traces;  // index = device
};

// The pickle memory_viz reads: {"segments": [...], "device_traces": [[...]]}
// with exactly the keys _snapshot() gives (docs/traces.md lists them).
std::string memory_snapshot_pickle(const MemorySnapshot& s);
// Writes it through io::OutputFile (complete or not at all).
void save_memory_snapshot(const MemorySnapshot& s, const std::string& path);

// Bounds on what a snapshot may cost: the pickle's (file size, values, text,
// depth) and the entries read (blocks of all segments, trace entries of all
// devices, frames kept per entry).
struct SnapshotLimits {
  pickle::PickleLimits pickle;
  uint64_t max_entries = uint64_t{8} << 20;  // segments + blocks + trace entries (~200 B each)
  size_t frames_kept = 1;                    // innermost frames kept per entry
};

// Reads a parsed snapshot. Throws TraceError(schema) naming the path of the
// offending field ("/device_traces/0/12/size: expected an int, found a str").
MemorySnapshot memory_snapshot_from_pickle(const pickle::Document& doc, const std::string& file,
                                           const SnapshotLimits& limits = {});
// Reads a file (gzip accepted) within `limits`.
MemorySnapshot load_memory_snapshot(const std::string& path, const SnapshotLimits& limits = {});

// What an import did, for people (`shardscope import` prints it).
struct SnapshotImportSummary {
  int32_t device = 0;                  // the device imported
  std::vector<int32_t> other_devices;  // devices with entries that were not imported
  int64_t segments = 0;
  int64_t trace_entries = 0;  // of the device imported
  int64_t allocations = 0;
  int64_t frees = 0;              // free_requested
  int64_t segment_events = 0;     // segment_alloc/free/map/unmap
  int64_t skipped = 0;            // free_completed, oom, snapshot and other actions: no record
  int64_t final_allocated = 0;    // bytes of active_allocated blocks at the snapshot
  int64_t final_reserved = 0;     // bytes of the segments at the snapshot
  int64_t initial_allocated = 0;  // before the first trace entry (worked back)
  int64_t initial_reserved = 0;
};

// Replaces the memory records of rank `r` of `t` with the snapshot's (the
// device with the most trace entries, then segments), on lanes "allocator
// stream N" (N: the allocator's stream value; 0 = the default stream). The
// rank's device is set when it has none. Throws TraceError(schema) when the
// trace and the segments disagree (working back from the segments to the
// trace's start gives negative counters).
void set_memory_from_snapshot(Trace& t, RankTrace& r, const MemorySnapshot& s,
                              const std::string& file, SnapshotImportSummary* summary = nullptr);
// The same for a new rank `rank` holding memory records only.
void add_memory_snapshot_rank(Trace& t, const MemorySnapshot& s, int32_t rank,
                              const std::string& file, SnapshotImportSummary* summary = nullptr);

// One rank per file, rank = position in `paths`.
Trace import_memory_snapshots(const std::vector<std::string>& paths,
                              std::vector<SnapshotImportSummary>* summaries = nullptr,
                              const SnapshotLimits& limits = {});

}  // namespace shardscope::traces
