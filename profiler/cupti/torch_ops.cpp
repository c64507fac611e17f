#include "profiler/cupti/torch_ops.h"

#include <algorithm>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "traces/kernel_names.h"
#include "traces/op_cost.h"

namespace shardscope::profiler {

namespace {

// The efficiency key of a backward op type (sim/hardware.cpp efficiency_key:
// "linear" -> "linear.backward"), which calibrate fits on its own.
constexpr std::string_view kBackwardSuffix = ".backward";

struct ParsedRange {
  const MarkerRecord* marker = nullptr;
  size_t index = 0;  // into Recording::markers: identifies the op instance
  traces::TorchNvtxParse parse = traces::TorchNvtxParse::not_torch;
  traces::TorchNvtxRange range;
};

enum class Found { op, outside, malformed };

// What a launch at `t` on one thread ran under: the ranges open at t,
// innermost first.
struct Enclosing {
  Found found = Found::outside;
  const ParsedRange* op = nullptr;
  bool backward = false;
};

Enclosing enclosing(const std::vector<const ParsedRange*>& open_innermost_first) {
  Enclosing e;
  size_t i = 0;
  for (; i < open_innermost_first.size(); ++i) {
    const ParsedRange* r = open_innermost_first[i];
    if (r->parse == traces::TorchNvtxParse::not_torch) continue;  // another program's range
    if (r->parse == traces::TorchNvtxParse::malformed) {
      e.found = Found::malformed;
      return e;
    }
    e.found = Found::op;
    e.op = r;
    break;
  }
  if (!e.op) return e;
  if (e.op->range.name.find("backward") != std::string::npos) {
    e.backward = true;
    return e;
  }
  for (; i < open_innermost_first.size(); ++i) {
    const ParsedRange* r = open_innermost_first[i];
    if (r->parse != traces::TorchNvtxParse::ok || r->range.seq < 0) continue;
    e.backward = traces::is_backward_node_name(r->range.name);
    break;
  }
  return e;
}

}  // namespace

std::vector<KernelOpCost> torch_op_costs(const Recording& rec, TorchOpSummary* summary) {
  TorchOpSummary local;
  TorchOpSummary& s = summary ? *summary : local;
  std::vector<KernelOpCost> out(rec.kernels.size());

  std::unordered_map<uint32_t, const LaunchRecord*> launch_of;  // correlation -> API call
  for (const LaunchRecord& l : rec.launches) launch_of.emplace(l.correlation, &l);

  // Ranges per thread in (start, longer first) order: an enclosing range
  // comes before the ranges it holds.
  std::vector<ParsedRange> ranges(rec.markers.size());
  std::unordered_map<uint32_t, std::vector<const ParsedRange*>> by_thread;
  for (size_t i = 0; i < rec.markers.size(); ++i) {
    const MarkerRecord& m = rec.markers[i];
    ParsedRange& r = ranges[i];
    r.marker = &m;
    r.index = i;
    r.parse = traces::parse_torch_nvtx(m.name, &r.range);
    by_thread[m.thread].push_back(&r);
  }
  for (auto& [thread, list] : by_thread)
    std::sort(list.begin(), list.end(), [](const ParsedRange* a, const ParsedRange* b) {
      return std::make_tuple(a->marker->start_ns, -a->marker->end_ns, a->index) <
             std::make_tuple(b->marker->start_ns, -b->marker->end_ns, b->index);
    });

  // Launches per thread in time order, each with the kernels it launched.
  struct Query {
    int64_t t;
    size_t kernel;
  };
  std::unordered_map<uint32_t, std::vector<Query>> queries;
  for (size_t k = 0; k < rec.kernels.size(); ++k) {
    const KernelRecord& kr = rec.kernels[k];
    if (traces::is_nccl_kernel(kr.name)) continue;
    ++s.kernels;
    if (kr.graph_id != 0) {
      ++s.graph_replay;
      continue;
    }
    auto l = launch_of.find(kr.correlation);
    if (kr.correlation == 0 || l == launch_of.end()) {
      ++s.no_launch_record;
      continue;
    }
    queries[l->second->thread].push_back(Query{l->second->start_ns, k});
  }

  // Per op instance (range index): the kernel carrying its cost, the longest.
  std::unordered_map<size_t, size_t> main_kernel;
  std::unordered_map<size_t, Enclosing> op_of_kernel;
  for (auto& [thread, list] : queries) {
    std::stable_sort(list.begin(), list.end(),
                     [](const Query& a, const Query& b) { return a.t < b.t; });
    static const std::vector<const ParsedRange*> kNone;
    auto it = by_thread.find(thread);
    const std::vector<const ParsedRange*>& thread_ranges =
        it == by_thread.end() ? kNone : it->second;
    std::vector<const ParsedRange*> stack;  // open ranges, outermost first
    size_t next = 0;
    for (const Query& q : list) {
      while (next < thread_ranges.size() && thread_ranges[next]->marker->start_ns <= q.t)
        stack.push_back(thread_ranges[next++]);
      // Ranges that ended before the launch (nested ranges end first, so the
      // innermost ones are on top).
      while (!stack.empty() && stack.back()->marker->end_ns < q.t) stack.pop_back();
      std::vector<const ParsedRange*> open;
      for (auto r = stack.rbegin(); r != stack.rend(); ++r)
        if ((*r)->marker->end_ns >= q.t) open.push_back(*r);
      const Enclosing e = enclosing(open);
      if (e.found == Found::outside) {
        ++s.outside_op_range;
        continue;
      }
      if (e.found == Found::malformed) {
        ++s.range_malformed;
        continue;
      }
      if (!e.op->range.has_sizes) {
        ++s.range_without_sizes;
        continue;
      }
      op_of_kernel[q.kernel] = e;
      auto [slot, fresh] = main_kernel.emplace(e.op->index, q.kernel);
      if (fresh) continue;
      const KernelRecord& a = rec.kernels[q.kernel];
      const KernelRecord& b = rec.kernels[slot->second];
      if (a.end_ns - a.start_ns > b.end_ns - b.start_ns) slot->second = q.kernel;
    }
  }

  for (const auto& [kernel, e] : op_of_kernel) {
    if (main_kernel.at(e.op->index) != kernel) {
      ++s.flops_on_other_kernel;
      continue;
    }
    const traces::KernelDtype dtype = traces::kernel_dtype(rec.kernels[kernel].name);
    // op_cost reads a tensor's dtype from its "Input type"; NVTX gives none,
    // so every input with dimensions is taken as a tensor of the kernel's
    // dtype ("float" stands in when it is unknown: FLOPs do not depend on
    // it, and the bytes are then dropped), and "[]" as a scalar or None.
    const std::string type =
        dtype == traces::KernelDtype::unknown ? "float" : traces::kernel_dtype_input_type(dtype);
    std::vector<std::string> types;
    types.reserve(e.op->range.sizes.size());
    for (const std::vector<int64_t>& dims : e.op->range.sizes)
      types.push_back(dims.empty() ? std::string() : type);
    const traces::OpCost cost = traces::op_cost(e.op->range.name, e.op->range.sizes, types);
    if (!cost.known || cost.flops == 0 || !cost.op_type) {
      ++s.op_not_costed;
      continue;
    }
    KernelOpCost& c = out[kernel];
    c.set = true;
    c.flops = cost.flops;
    c.bytes = dtype == traces::KernelDtype::unknown ? 0 : cost.bytes;
    c.op_type = cost.op_type;
    if (e.backward) c.op_type += kBackwardSuffix;
    c.op_name = e.op->range.name;
    c.dtype = dtype;
    ++s.with_flops;
    ++s.dtypes[traces::kernel_dtype_name(dtype)];
  }
  return out;
}

void add_torch_op_summary(const TorchOpSummary& s, std::map<std::string, std::string>& tools) {
  auto add = [&](const std::string& key, int64_t n) {
    std::string& v = tools["torch_nvtx." + key];
    int64_t before = 0;
    try {
      before = v.empty() ? 0 : std::stoll(v);
    } catch (const std::exception&) {
      throw ProfilerError("trace metadata tool_versions[\"torch_nvtx." + key + "\"] is \"" + v +
                          "\", not a count");
    }
    v = std::to_string(before + n);
  };
  add("kernels", s.kernels);
  add("with_flops", s.with_flops);
  add("no_launch_record", s.no_launch_record);
  add("graph_replay", s.graph_replay);
  add("outside_op_range", s.outside_op_range);
  add("range_without_sizes", s.range_without_sizes);
  add("range_malformed", s.range_malformed);
  add("op_not_costed", s.op_not_costed);
  add("flops_on_other_kernel", s.flops_on_other_kernel);
  for (const auto& [dtype, n] : s.dtypes) add("dtype." + dtype, n);
}

}  // namespace shardscope::profiler
