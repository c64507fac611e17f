// CUPTI activity recorder: what the GPU really did (kernels, copies, memsets,
// device memory allocations, synchronisation, NVTX ranges), with timestamps
// converted onto the host clock (profiler::host_now_ns) so that host and
// device events of one process share one axis.
//
// Used two ways: linked into the CUDA engine (`shardscope run --backend cuda
// --profile`), and inside the injection library loaded into any CUDA program
// through CUDA_INJECTION64_PATH (`shardscope profile -- COMMAND`).
//
// Activity kinds: CONCURRENT_KERNEL, MEMCPY, MEMSET, MEMORY2, SYNCHRONIZATION,
// MARKER (NVTX), EXTERNAL_CORRELATION, DEVICE (names); RUNTIME and DRIVER
// with CuptiConfig::external_correlation or ::launches (kept as launch
// records only with the latter: profiler/cupti/torch_ops.h). Buffers of
// CuptiConfig::buffer_bytes are handed to CUPTI and decoded on its completion
// callback and by take(); records CUPTI dropped (cuptiActivityGetNumDroppedRecords)
// are counted and reported in the Recording (and in the trace's metadata by
// append_recording).
//
// Clock: CUPTI asks profiler::host_now_ns() for every timestamp
// (cuptiActivityRegisterTimestampCallback), so GPU times come out on
// CLOCK_MONOTONIC, interpolated by CUPTI; when the callback cannot be
// registered, the offset between cuptiGetTimestamp() and host_now_ns() is
// measured at start and added (Recording::clock says which).
//
// NVTX ranges reach CUPTI only when NVTX_INJECTION64_PATH names libcupti (or
// a library forwarding to it, as libshardscope_inject.so does), set before the
// process's first NVTX call.
//
// One recorder per process: CUPTI has a single subscriber slot, also taken by
// Nsight Systems / Nsight Compute / cuda-gdb and by PyTorch's profiler
// (Kineto); start() refuses clearly when it is taken. See docs/profiler.md.
//
// This header does not include CUPTI or CUDA headers: it is usable from
// C++ code built without the toolkit's include path.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "traces/trace.h"

namespace shardscope::profiler {

class ProfilerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CuptiConfig {
  size_t buffer_bytes = size_t{4} << 20;  // per activity buffer
  bool memory = true;                     // MEMORY2 records
  bool synchronization = true;
  bool nvtx = true;  // MARKER records of NVTX ranges
  // push_external_id() tags the kernels, copies and memsets launched inside it.
  // CUPTI emits EXTERNAL_CORRELATION records only before API activity records,
  // so this also enables CUPTI_ACTIVITY_KIND_RUNTIME and _DRIVER (one record per
  // CUDA API call, decoded and dropped): on for the engine, off for injection.
  bool external_correlation = false;
  // Recording::launches: the thread and time of every CUDA runtime and driver
  // API call (CUPTI_ACTIVITY_KIND_RUNTIME and _DRIVER), which attribute a
  // kernel to the NVTX range open on its launching thread (torch_ops.h). One
  // record per API call: off unless asked for (`profile --torch-shapes`).
  bool launches = false;
};

// Records, host-clock nanoseconds. `stream` is CUPTI's stream id; `external_id`
// the id pushed with push_external_id() around the launch (0 = none).
struct KernelRecord {
  int64_t start_ns = 0, end_ns = 0;
  uint32_t device = 0, stream = 0, correlation = 0;
  uint64_t external_id = 0;
  std::string name;  // demangled
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  // The CUDA graph it ran in (CUPTI's graphId; 0 = launched on its own): a
  // graph replay's kernels share the correlation id of its cudaGraphLaunch.
  uint32_t graph_id = 0;
};
enum class CopyKind : uint8_t { h2d, d2h, d2d, h2h, other };
struct CopyRecord {
  int64_t start_ns = 0, end_ns = 0;
  uint32_t device = 0, stream = 0, correlation = 0;
  uint64_t external_id = 0, bytes = 0;
  CopyKind kind = CopyKind::other;
};
struct MemsetRecord {
  int64_t start_ns = 0, end_ns = 0;
  uint32_t device = 0, stream = 0, correlation = 0;
  uint64_t external_id = 0, bytes = 0;
};
// A device-memory allocation or release as CUPTI's MEMORY2 reports it
// (cudaMalloc, cudaFree, cudaMallocAsync pools, ...).
struct MemoryRecord {
  int64_t time_ns = 0;
  uint32_t device = 0;
  uint64_t address = 0, bytes = 0;
  bool allocation = true;  // false: release
  uint32_t correlation = 0;
  // Through the stream-ordered allocator (cudaMallocAsync and its pools):
  // individual blocks of a pool, not cudaMalloc-level segments.
  bool is_async = false;
};
struct SyncRecord {
  int64_t start_ns = 0, end_ns = 0;
  uint32_t stream = 0;  // 0xffffffff when not stream-specific
  std::string what;     // "cudaStreamSynchronize", "cudaEventSynchronize", ...
};
struct MarkerRecord {  // an NVTX range (push/pop or start/end); a mark has start == end
  int64_t start_ns = 0, end_ns = 0;
  std::string name;
  std::string domain;   // NVTX domain; "" = the default domain
  uint32_t thread = 0;  // CUPTI's id of the thread that started it; 0 = unknown
};
// A CUDA runtime or driver API call (CuptiConfig::launches): the kernels,
// copies and memsets it launched carry its correlation id.
struct LaunchRecord {
  int64_t start_ns = 0;
  uint32_t correlation = 0;
  uint32_t thread = 0;  // CUPTI's thread id, the same ids as MarkerRecord::thread
};

struct Recording {
  std::vector<KernelRecord> kernels;
  std::vector<CopyRecord> copies;
  std::vector<MemsetRecord> memsets;
  std::vector<MemoryRecord> memory;  // in time order
  std::vector<SyncRecord> syncs;
  std::vector<MarkerRecord> markers;
  std::vector<LaunchRecord> launches;            // CuptiConfig::launches; empty otherwise
  uint64_t dropped_records = 0;                  // CUPTI's count; > 0 means the trace is incomplete
  uint64_t untimed_records = 0;                  // records CUPTI gave without timestamps (left out)
  uint32_t cupti_api_version = 0;                // cuptiGetVersion(); 0 = unknown
  std::map<uint32_t, std::string> device_names;  // CUPTI device id -> "NVIDIA H100 80GB HBM3"
  // "host-monotonic (timestamp callback)" or "host-monotonic (offset measured at start)"
  std::string clock;
};

class CuptiRecorder {
 public:
  // Subscribes and enables the activity kinds. Throws ProfilerError with a
  // clear message when CUPTI is not available (no driver) or when another
  // profiler (Nsight Systems, PyTorch's Kineto, a second recorder) already
  // holds CUPTI's one subscriber slot (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED).
  static std::unique_ptr<CuptiRecorder> start(const CuptiConfig& config = {});
  ~CuptiRecorder();  // disables activities and unsubscribes (drops unread records)
  CuptiRecorder(const CuptiRecorder&) = delete;
  CuptiRecorder& operator=(const CuptiRecorder&) = delete;

  // CUPTI's id of a CUDA stream (a cudaStream_t passed as void*), for mapping
  // records to the caller's streams.
  uint32_t stream_id(void* cuda_stream) const;
  // External correlation around launches (the engine pushes its op index + 1).
  void push_external_id(uint64_t id);
  void pop_external_id();
  // For destructors: false when CUPTI refused the pop (nothing is thrown).
  bool pop_external_id_noexcept() noexcept;
  // Flushes CUPTI's buffers (cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED))
  // and returns the records collected so far (moved out; the recorder keeps
  // recording). Synchronize the device first: work still running is not in it.
  // NVTX ranges still open stay pending until they close.
  Recording take();

 private:
  CuptiRecorder() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// How to place a recording into a trace rank.
struct TraceMapping {
  // CUPTI stream id -> (lane name, lane kind); streams not listed get lanes
  // "stream <id>" ("gpu <device> stream <id>" when the recording spans several
  // devices) of a kind from what ran there: compute when any non-NCCL kernel
  // did, else comm when NCCL kernels did, else copy for copies and memsets
  // only, else other.
  std::map<uint32_t, std::pair<std::string, traces::LaneKind>> streams;
  // external id -> (event name, unit, op type): the engine's op for kernels
  // launched inside push_external_id(id); absent: the kernel's own name.
  std::function<bool(uint64_t external_id, std::string* name, std::string* unit, std::string* op)>
      op_for;
  // Memory category of an allocation at `address`; absent: MemoryCategory::other.
  std::function<traces::MemoryCategory(uint64_t address)> memory_category;
};

// Appends the recording's events to `rank` of `trace`: kernels (NCCL kernels
// as comm.all_gather / comm.reduce_scatter / ... from their names,
// traces/kernel_names.h; others as compute), copies (memcpy.h2d/d2h/d2d; h2h
// and unknown kinds count as d2d, as the Kineto importer does), memsets,
// syncs (on their stream's lane, or the "host" lane when not stream-specific
// or when the recording spans several devices), NVTX ranges as markers on a
// host-kind lane "nvtx" ("nvtx <domain>" for named domains); MEMORY2 records
// as memory events in time order with running allocated and reserved counters
// carried on from the rank's last memory record (reserved moves with allocated:
// every CUPTI allocation is a cudaMalloc-level one, no caching allocator above
// it that CUPTI can see). When the rank has no steps yet, NVTX ranges named
// "ProfilerStep#N" become its steps. rank.device is set from the records when
// unset, and trace.meta.hardware from the device name when empty. Metadata:
// tool_versions["cupti_dropped_records"] (added to any value already there),
// ["cupti"] (API version), ["cupti_untimed_records"] when > 0. Throws
// ProfilerError when the rank already has memory records later than the
// recording's first one.
void append_recording(const Recording& recording, const TraceMapping& mapping, traces::Trace& trace,
                      traces::RankTrace& rank);

}  // namespace shardscope::profiler
