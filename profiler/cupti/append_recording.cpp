// append_recording: CUPTI records -> trace events (no CUPTI or CUDA headers:
// built and tested without a GPU).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "profiler/cupti/cupti_recorder.h"
#include "profiler/cupti/torch_ops.h"
#include "traces/kernel_names.h"

namespace shardscope::profiler {

namespace {

using traces::Category;
using traces::LaneKind;

// What ran on one (device, stream): decides the kind of an unmapped lane.
struct StreamContent {
  int64_t compute_kernels = 0, nccl_kernels = 0, copies = 0;
};

LaneKind kind_from_content(const StreamContent& c) {
  if (c.compute_kernels > 0) return LaneKind::compute;
  if (c.nccl_kernels > 0) return LaneKind::comm;
  if (c.copies > 0) return LaneKind::copy;
  return LaneKind::other;
}

Category copy_category(CopyKind kind) {
  switch (kind) {
    case CopyKind::h2d:
      return Category::memcpy_h2d;
    case CopyKind::d2h:
      return Category::memcpy_d2h;
    default:
      return Category::memcpy_d2d;  // d2d, h2h and unknown kinds (the Kineto importer's rule)
  }
}

const char* copy_name(CopyKind kind) {
  switch (kind) {
    case CopyKind::h2d:
      return "Memcpy HtoD";
    case CopyKind::d2h:
      return "Memcpy DtoH";
    case CopyKind::d2d:
      return "Memcpy DtoD";
    case CopyKind::h2h:
      return "Memcpy HtoH";
    default:
      return "Memcpy";
  }
}

int64_t duration(int64_t start_ns, int64_t end_ns) {
  return end_ns > start_ns ? end_ns - start_ns : 0;  // CUPTI may give end == start
}

int32_t lane_stream(uint32_t stream) {
  return stream <= static_cast<uint32_t>(INT32_MAX) ? static_cast<int32_t>(stream) : -1;
}

uint64_t parse_count(const std::string& text) {
  try {
    return text.empty() ? 0 : std::stoull(text);
  } catch (const std::exception&) {
    throw ProfilerError("trace metadata tool_versions[\"cupti_dropped_records\"] is \"" + text +
                        "\", not a count");
  }
}

class Appender {
 public:
  Appender(const Recording& rec, const TraceMapping& mapping, traces::Trace& trace,
           traces::RankTrace& rank)
      : rec_(rec), mapping_(mapping), t_(trace), r_(rank) {}

  void run() {
    survey();
    kernels();
    copies();
    syncs();
    markers();
    memory();
    metadata();
  }

 private:
  void survey() {
    std::map<uint32_t, int64_t> per_device;
    for (const KernelRecord& k : rec_.kernels) {
      StreamContent& c = content_[{k.device, k.stream}];
      (traces::is_nccl_kernel(k.name) ? c.nccl_kernels : c.compute_kernels) += 1;
      ++per_device[k.device];
    }
    for (const CopyRecord& c : rec_.copies) {
      ++content_[{c.device, c.stream}].copies;
      ++per_device[c.device];
    }
    for (const MemsetRecord& m : rec_.memsets) {
      ++content_[{m.device, m.stream}].copies;
      ++per_device[m.device];
    }
    for (const MemoryRecord& m : rec_.memory) per_device.emplace(m.device, 0);
    many_devices_ = per_device.size() > 1;
    // The rank's device: the one most events ran on (ties: the lowest id).
    int64_t best = -1;
    for (const auto& [device, count] : per_device)
      if (count > best) {
        best = count;
        main_device_ = static_cast<int32_t>(device);
      }
    if (r_.device < 0 && main_device_ >= 0) r_.device = main_device_;
  }

  uint32_t stream_lane(uint32_t device, uint32_t stream) {
    auto it = mapping_.streams.find(stream);
    if (it != mapping_.streams.end())
      return t_.add_lane(r_, it->second.first, it->second.second, lane_stream(stream));
    std::string name = "stream " + std::to_string(stream);
    if (many_devices_) name = "gpu " + std::to_string(device) + " " + name;
    return t_.add_lane(r_, name, kind_from_content(content_[{device, stream}]),
                       lane_stream(stream));
  }

  void kernels() {
    // With launch records: the PyTorch op of each kernel from its NVTX ranges.
    std::vector<KernelOpCost> costs;
    if (!rec_.launches.empty()) {
      TorchOpSummary summary;
      costs = torch_op_costs(rec_, &summary);
      add_torch_op_summary(summary, t_.meta.tool_versions);
    }
    for (size_t i = 0; i < rec_.kernels.size(); ++i) {
      const KernelRecord& k = rec_.kernels[i];
      std::string name = k.name, unit, op;
      bool mapped = false;
      if (k.external_id != 0 && mapping_.op_for) {
        std::string mapped_name;
        mapped = mapping_.op_for(k.external_id, &mapped_name, &unit, &op);
        if (mapped) name = mapped_name;
      }
      traces::Event& e = traces::add_event(r_, stream_lane(k.device, k.stream), t_.intern(name),
                                           traces::kernel_category(k.name), k.start_ns,
                                           duration(k.start_ns, k.end_ns));
      e.correlation = k.correlation;
      if (!mapped && i < costs.size() && costs[i].set) {
        // Named by what it computes (calibrate fits graph op types); the
        // kernel keeps its own name, as the Kineto importer does.
        op = costs[i].op_type;
        e.flops = costs[i].flops;
        e.bytes = costs[i].bytes;
      }
      if (!unit.empty()) e.unit = t_.intern(unit);
      if (!op.empty()) e.op = t_.intern(op);
    }
  }

  void copies() {
    for (const CopyRecord& c : rec_.copies) {
      traces::Event& e =
          traces::add_event(r_, stream_lane(c.device, c.stream), t_.intern(copy_name(c.kind)),
                            copy_category(c.kind), c.start_ns, duration(c.start_ns, c.end_ns));
      e.bytes = c.bytes;
      e.correlation = c.correlation;
    }
    for (const MemsetRecord& m : rec_.memsets) {
      traces::Event& e =
          traces::add_event(r_, stream_lane(m.device, m.stream), t_.intern("Memset"),
                            Category::memset, m.start_ns, duration(m.start_ns, m.end_ns));
      e.bytes = m.bytes;
      e.correlation = m.correlation;
    }
  }

  void syncs() {
    for (const SyncRecord& s : rec_.syncs) {
      // A sync record has no device: with several devices its stream id is ambiguous.
      const bool on_stream = s.stream != 0xffffffffu && !many_devices_ && main_device_ >= 0;
      const uint32_t lane = on_stream ? stream_lane(static_cast<uint32_t>(main_device_), s.stream)
                                      : t_.add_lane(r_, "host", LaneKind::host);
      traces::add_event(r_, lane, t_.intern(s.what.empty() ? "synchronize" : s.what),
                        Category::sync, s.start_ns, duration(s.start_ns, s.end_ns));
    }
  }

  void markers() {
    const bool derive_steps = r_.steps.empty();
    for (const MarkerRecord& m : rec_.markers) {
      const std::string lane_name = m.domain.empty() ? "nvtx" : "nvtx " + m.domain;
      traces::add_event(r_, t_.add_lane(r_, lane_name, LaneKind::host), t_.intern(m.name),
                        Category::marker, m.start_ns, duration(m.start_ns, m.end_ns));
      int64_t number = 0;
      if (derive_steps && traces::parse_profiler_step(m.name, &number))
        r_.steps.push_back(traces::Step{number, m.start_ns, std::max(m.start_ns, m.end_ns)});
    }
    if (!derive_steps) return;
    std::sort(r_.steps.begin(), r_.steps.end(), [](const traces::Step& a, const traces::Step& b) {
      return std::tie(a.start_ns, a.number) < std::tie(b.start_ns, b.number);
    });
    // The same annotation twice (nested ranges of one step) counts once.
    r_.steps.erase(std::unique(r_.steps.begin(), r_.steps.end(),
                               [](const traces::Step& a, const traces::Step& b) {
                                 return a.start_ns == b.start_ns && a.number == b.number;
                               }),
                   r_.steps.end());
  }

  void memory() {
    std::vector<const MemoryRecord*> order;
    order.reserve(rec_.memory.size());
    for (const MemoryRecord& m : rec_.memory) order.push_back(&m);
    std::stable_sort(order.begin(), order.end(), [](const MemoryRecord* a, const MemoryRecord* b) {
      return a->time_ns < b->time_ns;
    });
    if (!order.empty() && !r_.memory.empty() && order.front()->time_ns < r_.memory.back().time_ns)
      throw ProfilerError("append_recording: rank " + std::to_string(r_.rank) +
                          " already has memory records up to " +
                          std::to_string(r_.memory.back().time_ns) +
                          " ns, later than the recording's first one at " +
                          std::to_string(order.front()->time_ns) + " ns");
    int64_t reserved = r_.memory.empty() ? 0 : r_.memory.back().reserved;
    for (const MemoryRecord* m : order) {
      const int64_t bytes = static_cast<int64_t>(m->bytes);
      const int64_t delta = m->allocation ? bytes : -bytes;
      // cudaMalloc-level allocations are segments: reserved moves with
      // allocated. Stream-ordered (cudaMallocAsync) blocks come out of pools
      // whose own reservations CUPTI's MEMORY2 records do not show: allocated
      // only.
      if (!m->is_async) reserved += delta;
      const traces::MemoryCategory category = mapping_.memory_category
                                                  ? mapping_.memory_category(m->address)
                                                  : traces::MemoryCategory::other;
      traces::add_allocation(r_, m->time_ns, delta, m->address, traces::kNoLane, category,
                             reserved);
    }
  }

  void metadata() {
    auto& tools = t_.meta.tool_versions;
    const uint64_t dropped = parse_count(tools["cupti_dropped_records"]) + rec_.dropped_records;
    tools["cupti_dropped_records"] = std::to_string(dropped);
    if (rec_.untimed_records > 0) {
      const uint64_t untimed = parse_count(tools["cupti_untimed_records"]) + rec_.untimed_records;
      tools["cupti_untimed_records"] = std::to_string(untimed);
    }
    if (rec_.cupti_api_version != 0) {
      // 130001 -> "13.0.1 (API 130001)": CUDA 13+ encodes major, minor, update.
      const uint32_t v = rec_.cupti_api_version;
      tools["cupti"] = v >= 130000
                           ? std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                                 std::to_string(v % 100) + " (API " + std::to_string(v) + ")"
                           : "API " + std::to_string(v);
    }
    if (t_.meta.hardware.empty() && r_.device >= 0) {
      auto it = rec_.device_names.find(static_cast<uint32_t>(r_.device));
      if (it != rec_.device_names.end()) t_.meta.hardware = it->second;
    }
  }

  const Recording& rec_;
  const TraceMapping& mapping_;
  traces::Trace& t_;
  traces::RankTrace& r_;
  std::map<std::pair<uint32_t, uint32_t>, StreamContent> content_;  // (device, stream)
  bool many_devices_ = false;
  int32_t main_device_ = -1;
};

}  // namespace

void append_recording(const Recording& recording, const TraceMapping& mapping, traces::Trace& trace,
                      traces::RankTrace& rank) {
  Appender(recording, mapping, trace, rank).run();
}

}  // namespace shardscope::profiler
