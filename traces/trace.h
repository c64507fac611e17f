// The trace model: one representation for every source (simulator, engine on
// CPU or CUDA, imported PyTorch profiler traces). Metrics (traces/metrics.h),
// the native formats (traces/trace_io.h), Chrome export and the GUI all read
// this and nothing else.
//
// Sized for 10M+ events: events are compact PODs (56 bytes) whose strings
// (names, units, op types, lane names) are interned once per trace in a
// StringTable and referred to by 32-bit ids. All times are integer
// nanoseconds on one clock per trace (ranks already aligned; see
// Metadata::clock_alignment).
//
// Building a trace (what the simulator and the engine do):
//
//   Trace t;
//   t.meta.source = Source::simulator;
//   RankTrace& r = t.add_rank(0);
//   uint32_t compute = t.add_lane(r, "compute", LaneKind::compute);
//   Event& e = add_event(r, compute, t.intern("h.0.mlp.fc1 fwd"), Category::compute, 1000, 250);
//   e.unit = t.intern("h.0");
//   e.op = t.intern("matmul");
//   e.flops = 1 << 30;
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace shardscope::traces {

// What an event is. COMM (is_comm) = the collectives; COMP (is_compute) =
// compute; copies and memsets are neither (Holistic Trace Analysis counting).
enum class Category : uint8_t {
  compute = 0,
  comm_all_gather = 1,
  comm_reduce_scatter = 2,
  comm_all_reduce = 3,
  comm_other = 4,  // other collectives and point-to-point: broadcast, send/recv, all-to-all
  memcpy_h2d = 5,
  memcpy_d2h = 6,
  memcpy_d2d = 7,
  memset = 8,
  sync = 9,     // waiting: stream waits on an event, host blocks on a stream
  marker = 10,  // annotations and instants; never counted as busy time
  host = 11     // host-side work: framework ops (cpu_op), user annotations, runtime and
                // driver calls (launches, synchronizations, memcpy calls); never device
                // time, so HTA's compute / non-compute split is unchanged by it
};
constexpr int kCategoryCount = 12;

// "compute", "comm.all_gather", ..., "memcpy.h2d", "memset", "sync", "marker".
const char* category_name(Category c);
// Inverse of category_name; false when `name` is not one.
bool parse_category(std::string_view name, Category* out);
inline bool is_comm(Category c) {
  return c >= Category::comm_all_gather && c <= Category::comm_other;
}
inline bool is_compute(Category c) {
  return c == Category::compute;
}
inline bool is_copy(Category c) {
  return c >= Category::memcpy_h2d && c <= Category::memset;
}

// What a lane (stream) is; fixes the order of lanes in exports (host, compute,
// communication, copies, other). Every lane but `host` is a device lane: idle
// time is measured on device lanes.
enum class LaneKind : uint8_t { host = 0, compute = 1, comm = 2, copy = 3, other = 4 };
constexpr int kLaneKindCount = 5;
const char* lane_kind_name(LaneKind k);  // "host", "compute", "comm", "copy", "other"
bool parse_lane_kind(std::string_view name, LaneKind* out);

// memory_snapshot: imported from torch.cuda.memory._dump_snapshot (memory records only).
enum class Source : uint8_t {
  unknown = 0,
  simulator,
  engine_cpu,
  engine_cuda,
  kineto,
  memory_snapshot
};
constexpr int kSourceCount = 6;
// "unknown", "simulator", "engine-cpu", "engine-cuda", "kineto", "memory-snapshot"
const char* source_name(Source s);
bool parse_source(std::string_view name, Source* out);

// What an allocation holds.
enum class MemoryCategory : uint8_t {
  unknown = 0,
  parameters = 1,
  gradients = 2,
  optimizer_state = 3,
  activations = 4,
  comm_buffers = 5,
  temporaries = 6,
  other = 7
};
constexpr int kMemoryCategoryCount = 8;
// "unknown", "parameters", "gradients", "optimizer_state", "activations",
// "comm_buffers", "temporaries", "other".
const char* memory_category_name(MemoryCategory c);
bool parse_memory_category(std::string_view name, MemoryCategory* out);

constexpr uint32_t kNoString = 0;  // string id of "" (an absent unit, op, ...)
constexpr uint32_t kNoLane = 0xffffffffu;

// Interned strings: id 0 is always "". Ids are dense, in insertion order.
class StringTable {
 public:
  StringTable();
  StringTable(const StringTable& other);
  StringTable& operator=(const StringTable& other);
  StringTable(StringTable&&) noexcept = default;
  StringTable& operator=(StringTable&&) noexcept = default;

  uint32_t intern(std::string_view s);
  // kNotFound when absent.
  uint32_t find(std::string_view s) const;
  static constexpr uint32_t kNotFound = 0xffffffffu;
  // `id` must be < size().
  std::string_view get(uint32_t id) const { return strings_[id]; }
  uint32_t size() const { return static_cast<uint32_t>(strings_.size()); }
  // Total bytes of string data (for size accounting).
  size_t bytes() const { return bytes_; }

 private:
  void rebuild_index();
  std::deque<std::string> strings_;  // deque: elements never move, the index views them
  std::unordered_map<std::string_view, uint32_t> index_;
  size_t bytes_ = 0;
};

// A stream of one rank: the host (issue order, host blocking), a compute
// stream, a communication stream, a copy stream...
struct Lane {
  uint32_t name = kNoString;  // string id: "host", "compute", "comm", "stream 7", ...
  LaneKind kind = LaneKind::other;
  int32_t stream = -1;  // device stream id (CUDA stream, Kineto tid), -1 when none
};

// One interval of work on a lane. 56 bytes; the binary format stores it as is.
struct Event {
  int64_t start_ns = 0;
  int64_t dur_ns = 0;         // >= 0
  uint64_t bytes = 0;         // bytes moved (collectives, copies, memsets) or touched; 0 = unknown
  uint64_t flops = 0;         // floating-point operations; 0 = unknown
  uint32_t name = kNoString;  // display name: op instance or kernel name
  uint32_t unit = kNoString;  // FSDP unit ("h.3"); kNoString = none
  uint32_t op = kNoString;    // graph op type ("matmul"); kNoString = use the name
  uint32_t correlation = 0;   // CUPTI/Kineto correlation id; 0 = none
  uint32_t lane = 0;          // index into RankTrace::lanes
  Category category = Category::compute;
  uint8_t reserved[3] = {0, 0, 0};  // zero
};

// One allocation or free, with the rank's counters after it. A record with
// bytes == 0 only moves the counters (e.g. the allocator reserving or
// releasing a segment without an allocation). 48 bytes.
struct MemoryEvent {
  int64_t time_ns = 0;
  int64_t bytes = 0;        // > 0 allocation, < 0 free, 0 counters only
  int64_t allocated = 0;    // rank's allocated bytes after this event
  int64_t reserved = 0;     // rank's reserved bytes (allocator segments) after this event
  uint64_t address = 0;     // 0 = unknown
  uint32_t lane = kNoLane;  // the stream the block belongs to; kNoLane = unknown
  MemoryCategory category = MemoryCategory::unknown;
  uint8_t reserved_pad[3] = {0, 0, 0};  // zero
};

// A link between two events of one rank (indices into RankTrace::events):
// `to` waited for `from` (stream and event waits), or, when `from` is a host
// event and `to` a device event with the same correlation id, `from`
// launched `to` (a runtime call and its kernel: is_launch_flow).
struct Flow {
  uint32_t from = 0;
  uint32_t to = 0;
};

// A training step on one rank. Membership: an event (or memory record)
// belongs to step i when steps[i].start_ns <= start < steps[i+1].start_ns
// (the last step is open-ended); before the first step it belongs to none.
// end_ns marks where the host finished the step (shown in exports).
struct Step {
  int64_t number = 0;  // as recorded: ProfilerStep#N, engine step counter
  int64_t start_ns = 0;
  int64_t end_ns = 0;  // >= start_ns
};

struct RankTrace {
  int32_t rank = 0;
  int32_t device = -1;              // GPU ordinal, -1 for a CPU rank
  int64_t clock_offset_ns = 0;      // already added to this rank's times to align its clock
  std::vector<int32_t> represents;  // simulator: ranks this one stands for (empty = itself)
  std::vector<Lane> lanes;
  std::vector<Event> events;        // any order; sort_events() for (start, lane) order
  std::vector<MemoryEvent> memory;  // in time order
  std::vector<Flow> flows;
  std::vector<Step> steps;  // in start order
};

struct Metadata {
  Source source = Source::unknown;
  std::string model;        // preset name, config path or graph name
  std::string policy_json;  // the policy as compact JSON text; "" = none
  std::string hardware;     // preset name or hardware JSON path / device name
  int32_t world_size = 0;   // 0 = the number of ranks represented
  std::map<std::string, std::string> tool_versions;  // "shardscope" -> "0.1.0", ...
  std::string clock_alignment;  // how rank clocks were aligned: "none", "barrier", ...
};

struct Trace {
  Metadata meta;
  StringTable strings;
  std::vector<RankTrace> ranks;

  uint32_t intern(std::string_view s) { return strings.intern(s); }
  std::string_view str(uint32_t id) const { return strings.get(id); }

  // Appends a rank; throws std::invalid_argument when it already exists.
  RankTrace& add_rank(int32_t rank);
  // nullptr when absent.
  RankTrace* find_rank(int32_t rank);
  const RankTrace* find_rank(int32_t rank) const;
  // The lane named `name` of `r`, added when absent; returns its index.
  uint32_t add_lane(RankTrace& r, std::string_view name, LaneKind kind, int32_t stream = -1);

  size_t event_count() const;
  // World size as recorded, else the number of ranks represented.
  int32_t world_size() const;
};

// True when `f` is a launch: `from` on a host lane, `to` on a device lane,
// both with the same non-zero correlation id (the Kineto importer's links).
bool is_launch_flow(const RankTrace& r, const Flow& f);

// Appends an event and returns it for setting args (unit, op, bytes, ...).
// The reference is valid until the next append.
Event& add_event(RankTrace& r, uint32_t lane, uint32_t name, Category category, int64_t start_ns,
                 int64_t dur_ns);

// Appends an allocation (bytes > 0) or a free (bytes < 0) at `time_ns`, with
// `allocated` the running total of the rank's records (the last record's
// allocated + bytes) and `reserved` as the allocator reports it. Records must
// be appended in time order.
MemoryEvent& add_allocation(RankTrace& r, int64_t time_ns, int64_t bytes, uint64_t address,
                            uint32_t lane, MemoryCategory category, int64_t reserved);

// Sorts a rank's events by (start, lane, longer first) and remaps flows; sorts
// memory by time and steps by start (both stable).
void sort_events(RankTrace& r);

// Throws TraceError(schema) naming the first offending field (as a JSON-like
// path such as "/ranks/0/events/3/lane") when the trace is inconsistent: ids
// out of range, negative durations, start + dur overflowing, steps out of
// order or ending before they start, duplicate ranks, flows out of range.
// `file` names the trace in the message.
void validate(const Trace& t, const std::string& file = "trace");

// Exact equality of everything stored (strings compared by content).
bool operator==(const Trace& a, const Trace& b);
inline bool operator!=(const Trace& a, const Trace& b) {
  return !(a == b);
}

}  // namespace shardscope::traces
