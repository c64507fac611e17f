#include "traces/kineto_import.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <set>
#include <thread>
#include <unordered_map>

#include "traces/error.h"
#include "traces/file_io.h"
#include "traces/input.h"
#include "traces/json_scan.h"
#include "traces/kineto_read.h"
#include "traces/merge.h"
#include "traces/op_cost.h"

namespace shardscope::traces {

namespace {

using kineto::Document;
using kineto::Kind;
using kineto::RawEvent;
using kineto::RawLane;

// record_shapes "Input Dims": one entry per input, [] for scalars and None,
// [d0, d1, ...] for tensors. Anything else (tensor lists) gives an empty
// entry and `*ok` false for that input, so op_cost sees no valid shape.
bool parse_input_dims(std::string_view text, std::vector<std::vector<int64_t>>* out) {
  static const std::string kName = "Input Dims";
  JsonScanner s(text, kName);
  out->clear();
  try {
    s.begin_array();
    for (bool first = true; s.next_element(first);) {
      out->emplace_back();
      if (s.peek_kind() != JsonKind::array) {
        s.skip();
        continue;
      }
      s.begin_array();
      for (bool f = true; s.next_element(f);) {
        int64_t v = 0;
        if (s.peek_kind() != JsonKind::number || !parse_json_int(s.number(), &v)) {
          s.skip();
          return false;  // a tensor list or a non-integer dimension
        }
        out->back().push_back(v);
      }
    }
  } catch (const TraceError&) {
    return false;
  }
  return true;
}

// "Input type" and "Concrete Inputs": one string per input.
bool parse_string_list(std::string_view text, std::vector<std::string>* out) {
  static const std::string kName = "Input type";
  JsonScanner s(text, kName);
  out->clear();
  try {
    s.begin_array();
    for (bool first = true; s.next_element(first);) {
      if (s.peek_kind() == JsonKind::string) {
        out->emplace_back(s.string());
      } else {
        s.skip();
        out->emplace_back();
      }
    }
  } catch (const TraceError&) {
    return false;
  }
  return true;
}

std::string lane_display_name(const Document& d, const RawLane& l, bool many_devices) {
  auto named = d.thread_names.find(l.pid + "/" + l.tid);
  if (named != d.thread_names.end()) {
    std::string name = named->second;
    if (l.device && many_devices) name = "gpu " + std::to_string(l.device_id) + " " + name;
    return name;
  }
  if (!l.device) {
    auto strip = [](const std::string& id) {
      return id.size() && id[0] == '"' ? id.substr(1) : id;
    };
    return "host thread " + strip(l.tid);
  }
  std::string name = "stream " + std::to_string(l.stream);
  if (many_devices) name = "gpu " + std::to_string(l.device_id) + " " + name;
  return name;
}

// The RawEvent of each event of a rank being built (`from`: its index in
// the document's, empty = the same index).
struct RawEvents {
  const std::vector<RawEvent>& raw;
  const std::vector<uint32_t>& from;
  const RawEvent& operator[](size_t i) const { return raw[from.empty() ? i : from[i]]; }
};

class RankBuilder {
 public:
  RankBuilder(Trace& t, Document& d, const std::string& file, KinetoImportSummary* summary)
      : t_(t), d_(d), file_(file), summary_(summary) {}

  // Builds rank `rank` from the lanes, steps and memory whose pid passes
  // `take_pid` (all when null).
  void build(int32_t rank, const std::string* only_pid) {
    if (t_.find_rank(rank))
      throw TraceError(ErrorKind::schema, file_, "/distributedInfo/rank",
                       "rank " + std::to_string(rank) + " appears in two files");
    RankTrace& r = t_.add_rank(rank);
    auto taken = [&](const std::string& pid) { return !only_pid || pid == *only_pid; };

    // The rank's device: the one most device events ran on, else the first
    // with memory records.
    std::map<int32_t, int64_t> per_device;
    for (const RawLane& l : d_.lanes)
      if (l.device && taken(l.pid) && l.device_id >= 0)
        per_device[l.device_id] += l.compute + l.comm + l.copies + l.other;
    int64_t best = 0;
    for (const auto& [dev, n] : per_device)
      if (n > best) {
        best = n;
        r.device = dev;
      }
    if (r.device < 0)
      for (const auto& m : d_.memory)
        if (taken(m.pid)) {
          r.device = m.device;
          break;
        }

    // Lanes in display order: host (by pid, tid), then device lanes by kind
    // (compute, comm, copies, other), then stream.
    auto kind_of = [](const RawLane& l) {
      if (!l.device) return LaneKind::host;
      if (l.compute) return LaneKind::compute;
      if (l.comm) return LaneKind::comm;
      if (l.copies) return LaneKind::copy;
      return LaneKind::other;
    };
    std::vector<uint32_t> order;
    for (uint32_t i = 0; i < d_.lanes.size(); ++i)
      if (taken(d_.lanes[i].pid)) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      const RawLane &la = d_.lanes[a], &lb = d_.lanes[b];
      const LaneKind ka = kind_of(la), kb = kind_of(lb);
      if (ka != kb) return ka < kb;
      if (la.device)
        return la.device_id != lb.device_id ? la.device_id < lb.device_id : la.stream < lb.stream;
      return false;  // host lanes: first appearance
    });
    bool many_devices = false;
    int32_t first_device = -2;
    for (uint32_t i : order) {
      const RawLane& l = d_.lanes[i];
      if (!l.device) continue;
      if (first_device == -2) first_device = l.device_id;
      many_devices |= l.device_id != first_device;
    }
    std::vector<uint32_t> new_index(d_.lanes.size(), kNoLane);
    std::set<std::string> used_names;
    for (uint32_t k = 0; k < order.size(); ++k) {
      const RawLane& l = d_.lanes[order[k]];
      new_index[order[k]] = k;
      const std::string name = lane_display_name(d_, l, many_devices);
      std::string unique = name;
      for (int n = 2; used_names.count(unique); ++n) unique = name + " #" + std::to_string(n);
      used_names.insert(unique);
      r.lanes.push_back(Lane{t_.intern(unique), kind_of(l), l.device ? l.stream : -1});
    }

    const int64_t base = d_.base_ns;
    auto shift = [&](int64_t ns, size_t offset) {
      if (ns > INT64_MAX / 2 - base)
        throw TraceError(ErrorKind::schema, file_, "byte " + std::to_string(offset),
                         "timestamp out of range");
      return ns + base;
    };
    // gloo runs collectives on the host: in a rank without device work they
    // are its communication; with device work (the MTIA trace's
    // gloo:barrier) they stay host events, as HTA counts device kernels only.
    bool any_device = false;
    for (uint32_t i : order) any_device = any_device || d_.lanes[i].device;
    auto finish_event = [&](Event& out, const RawEvent& e) {
      out.start_ns = shift(out.start_ns, e.offset);
      out.lane = new_index[out.lane];
      if (kineto::is_device_kind(e.kind) && d_.invented_correlations.count(e.correlation))
        out.correlation = 0;
      if (!any_device && e.host_collective != Category::host && out.category == Category::host)
        out.category = e.host_collective;
    };
    // d_.raw index of each event of the rank; empty = the same index.
    std::vector<uint32_t> from;
    if (!only_pid) {
      // Every event is this rank's: they move, no copy of the largest array.
      r.events = std::move(d_.events);
      d_.events.clear();
      for (size_t i = 0; i < r.events.size(); ++i) finish_event(r.events[i], d_.raw[i]);
    } else {
      size_t taken_events = 0;
      for (const Event& e : d_.events) taken_events += new_index[e.lane] != kNoLane;
      r.events.reserve(taken_events);
      from.reserve(taken_events);
      for (size_t i = 0; i < d_.events.size(); ++i) {
        if (new_index[d_.events[i].lane] == kNoLane) continue;
        r.events.push_back(d_.events[i]);
        finish_event(r.events.back(), d_.raw[i]);
        from.push_back(static_cast<uint32_t>(i));
      }
    }
    link(r, from);
    if (!only_pid) {
      // Not needed any more: freed before sort_events copies the events.
      std::vector<RawEvent>().swap(d_.raw);
      std::vector<kineto::RawShapes>().swap(d_.shapes);
    }

    for (const auto& m : d_.memory) {
      if (!taken(m.pid) || m.device != r.device) continue;  // another GPU's memory
      MemoryEvent rec = m.record;
      rec.time_ns = shift(rec.time_ns, 0);
      r.memory.push_back(rec);
    }
    std::vector<Step> steps;
    for (const auto& s : d_.steps)
      if (taken(s.pid)) steps.push_back(s.step);
    std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.number < b.number;
    });
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& s = steps[i];
      if (i > 0 && steps[i - 1].start_ns == s.start_ns && steps[i - 1].number == s.number)
        continue;  // the same annotation twice
      r.steps.push_back(Step{s.number, shift(s.start_ns, 0), shift(s.end_ns, 0)});
    }
    if (r.events.empty() && r.memory.empty() && r.steps.empty()) {
      const std::string skipped = describe_skipped(d_.skipped);
      throw TraceError(
          ErrorKind::schema, file_, "/traceEvents",
          "nothing to import: no device or host events, steps or memory records" +
              (skipped.empty()
                   ? std::string()
                   : " (Kineto categories not imported: " + clip_input(skipped, 400) + ")"));
    }
    sort_events(r);
    for (const auto& [id, name] : d_.device_names)
      if (id == r.device && t_.meta.hardware.empty()) t_.meta.hardware = name;
    if (summary_) {
      summary_->memory_records += static_cast<int64_t>(r.memory.size());
      for (const auto& [cat, n] : d_.skipped) summary_->skipped[cat] += n;
    }
  }

 private:
  // Launch links: each device event with a correlation id gets a flow from
  // the runtime/driver call with the same id. Its launching operator is the
  // innermost cpu_op around that call on the same thread (or, when the
  // kernel names an External id, the cpu_op with that id enclosing the
  // call); with record_shapes, that operator's input dims give the kernel's
  // FLOPs and bytes (op_cost), placed on the longest compute kernel the
  // operator launched.
  void link(RankTrace& r, const std::vector<uint32_t>& from) {
    const RawEvents raw{d_.raw, from};
    std::unordered_map<uint64_t, uint32_t> launcher;  // correlation -> host call
    std::unordered_map<int64_t, uint32_t> op_by_external;
    for (uint32_t i = 0; i < r.events.size(); ++i) {
      const RawEvent& e = raw[i];
      if ((e.kind == Kind::runtime || e.kind == Kind::driver) && e.correlation)
        launcher.emplace(e.correlation, i);
      if (e.kind == Kind::cpu_op && e.external_id >= 0) op_by_external.emplace(e.external_id, i);
    }
    const std::vector<uint32_t> enclosing = innermost_enclosing_op(r, raw);
    // Per operator: its longest compute kernel.
    std::unordered_map<uint32_t, uint32_t> main_kernel;
    for (uint32_t i = 0; i < r.events.size(); ++i) {
      const RawEvent& e = raw[i];
      if (!kineto::is_device_kind(e.kind)) {
        ++(summary_ ? summary_->host_events : dummy_);
        continue;
      }
      if (e.kind == Kind::gpu_annotation) continue;  // ranges, not launched work
      if (summary_) ++summary_->device_events;
      auto it = e.correlation ? launcher.find(e.correlation) : launcher.end();
      if (it == launcher.end()) {
        if (summary_) ++summary_->unlinked_device;
        continue;
      }
      const uint32_t call = it->second;
      r.flows.push_back(Flow{call, i});
      if (summary_) ++summary_->launch_links;
      uint32_t op = enclosing[call];
      if (e.external_id >= 0) {
        auto ext = op_by_external.find(e.external_id);
        if (ext != op_by_external.end() && encloses(r.events[ext->second], r.events[call]) &&
            r.events[ext->second].lane == r.events[call].lane)
          op = ext->second;
      }
      if (op == kNoOp || !is_compute(r.events[i].category)) continue;
      auto [slot, fresh] = main_kernel.emplace(op, i);
      if (!fresh && r.events[i].dur_ns > r.events[slot->second].dur_ns) slot->second = i;
    }
    std::vector<std::vector<int64_t>> dims;
    std::vector<std::string> types, concrete;
    for (const auto& [op, kernel] : main_kernel) {
      const RawEvent& o = raw[op];
      if (o.shapes == RawEvent::kNoShapes || r.events[kernel].flops) continue;
      const kineto::RawShapes& shapes = d_.shapes[o.shapes];
      if (shapes.input_dims.empty()) continue;
      if (!parse_input_dims(shapes.input_dims, &dims)) continue;
      if (!shapes.input_types.empty() && !parse_string_list(shapes.input_types, &types)) continue;
      if (shapes.input_types.empty()) types.clear();
      if (!shapes.concrete_inputs.empty() && !parse_string_list(shapes.concrete_inputs, &concrete))
        continue;
      if (shapes.concrete_inputs.empty()) concrete.clear();
      const OpCost cost = op_cost(t_.str(r.events[op].name), dims, types, concrete);
      if (!cost.known) continue;
      r.events[kernel].flops = cost.flops;
      if (!r.events[kernel].bytes) r.events[kernel].bytes = cost.bytes;
      // Named by what it computes (calibrate fits graph op types; the
      // kernel's own name stays its name).
      if (cost.op_type && r.events[kernel].op == kNoString)
        r.events[kernel].op = t_.intern(cost.op_type);
      if (summary_) ++summary_->kernels_with_flops;
    }
  }

  static bool encloses(const Event& outer, const Event& inner) {
    return outer.start_ns <= inner.start_ns &&
           inner.start_ns + inner.dur_ns <= outer.start_ns + outer.dur_ns;
  }

  static constexpr uint32_t kNoOp = 0xffffffffu;

  // For every host event, the innermost cpu_op on its lane that encloses it
  // (kNoOp when none): a sweep per lane in (start, longer first) order.
  static std::vector<uint32_t> innermost_enclosing_op(const RankTrace& r, const RawEvents& raw) {
    std::vector<uint32_t> out(r.events.size(), kNoOp);
    std::vector<uint32_t> host;
    for (uint32_t i = 0; i < r.events.size(); ++i)
      if (!kineto::is_device_kind(raw[i].kind)) host.push_back(i);
    std::sort(host.begin(), host.end(), [&](uint32_t a, uint32_t b) {
      const Event &x = r.events[a], &y = r.events[b];
      if (x.lane != y.lane) return x.lane < y.lane;
      if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
      return x.dur_ns > y.dur_ns;
    });
    std::vector<uint32_t> stack;  // open cpu_ops, outermost first
    uint32_t lane = kNoLane;
    for (uint32_t i : host) {
      const Event& e = r.events[i];
      if (e.lane != lane) {
        stack.clear();
        lane = e.lane;
      }
      while (!stack.empty() && !encloses(r.events[stack.back()], e)) stack.pop_back();
      out[i] = stack.empty() ? kNoOp : stack.back();
      if (raw[i].kind == Kind::cpu_op) stack.push_back(i);
    }
    return out;
  }

  Trace& t_;
  Document& d_;
  const std::string& file_;
  KinetoImportSummary* summary_;
  int64_t dummy_ = 0;
};

}  // namespace

std::string describe_skipped(const std::map<std::string, int64_t>& skipped) {
  std::string out;
  for (const auto& [cat, n] : skipped)
    out += (out.empty() ? "" : ", ") + cat + " " + std::to_string(n);
  return out;
}

namespace {

// The rank(s) of one document into `t`; returns the world size it names.
int32_t add_document(Trace& t, Document& d, const std::string& name, int32_t fallback_rank,
                     KinetoImportSummary* summary) {
  if (summary)
    summary->text_window_bytes = std::max<uint64_t>(summary->text_window_bytes, d.text_window_peak);
  if (!d.schema_version.empty()) t.meta.tool_versions["kineto_schema"] = d.schema_version;
  RankBuilder builder(t, d, name, summary);
  if (d.shardscope) {
    // shardscope's combined export: process id = rank.
    std::set<std::string> pids;
    for (const RawLane& l : d.lanes) pids.insert(l.pid);
    for (const auto& s : d.steps) pids.insert(s.pid);
    for (const auto& m : d.memory) pids.insert(m.pid);
    std::vector<std::pair<int32_t, std::string>> ranks;
    for (const std::string& pid : pids) {
      int64_t v = 0;
      if (!parse_json_int(pid, &v) || v < 0 || v > INT32_MAX)
        throw TraceError(
            ErrorKind::schema, name, "/traceEvents",
            "a shardscope export whose process id " + clip_input(pid) + " is not a rank");
      ranks.emplace_back(static_cast<int32_t>(v), pid);
    }
    std::sort(ranks.begin(), ranks.end());
    if (ranks.empty()) ranks.emplace_back(d.rank >= 0 ? d.rank : fallback_rank, std::string());
    for (const auto& [rank, pid] : ranks) builder.build(rank, pid.empty() ? nullptr : &pid);
  } else {
    builder.build(d.rank >= 0 ? d.rank : fallback_rank, nullptr);
  }
  return d.world;
}

Trace kineto_trace() {
  Trace t;
  t.meta.source = Source::kineto;
  t.meta.clock_alignment = "none: Kineto baseTimeNanoseconds + ts, as recorded";
  return t;
}

void finish_trace(Trace& t, int32_t world, const std::string& name) {
  std::sort(t.ranks.begin(), t.ranks.end(),
            [](const RankTrace& a, const RankTrace& b) { return a.rank < b.rank; });
  t.meta.world_size = std::max(world, static_cast<int32_t>(t.ranks.size()));
  validate(t, name);
}

}  // namespace

int32_t import_kineto_rank(Trace& t, std::string_view text, const std::string& name,
                           int32_t fallback_rank, KinetoImportSummary* summary) {
  Document d = kineto::read_document(text, name, t);
  return add_document(t, d, name, fallback_rank, summary);
}

int32_t import_kineto_rank(Trace& t, InputFile& in, const InputLimits& limits, std::string head,
                           int32_t fallback_rank, KinetoImportSummary* summary) {
  auto source = json_text_source(in, limits, head);
  Document d = kineto::read_document(std::move(source), std::move(head), in.path(), t);
  return add_document(t, d, in.path(), fallback_rank, summary);
}

Trace import_kineto_text(std::string_view text, const std::string& name,
                         KinetoImportSummary* summary) {
  Trace t = kineto_trace();
  const int32_t world = import_kineto_rank(t, text, name, 0, summary);
  finish_trace(t, world, name);
  return t;
}

Trace import_kineto_source(std::function<size_t(std::string& out, size_t n)> source,
                           std::string head, const std::string& name,
                           KinetoImportSummary* summary) {
  Trace t = kineto_trace();
  Document d = kineto::read_document(std::move(source), std::move(head), name, t);
  const int32_t world = add_document(t, d, name, 0, summary);
  finish_trace(t, world, name);
  return t;
}

Trace import_kineto_stream(InputFile& in, const InputLimits& limits, std::string head,
                           KinetoImportSummary* summary) {
  Trace t = kineto_trace();
  const int32_t world = import_kineto_rank(t, in, limits, std::move(head), 0, summary);
  finish_trace(t, world, in.path());
  return t;
}

Trace import_kineto(const std::vector<std::string>& paths, KinetoImportSummary* summary,
                    int threads) {
  Trace t = kineto_trace();
  int32_t world = 0;
  const InputLimits limits;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), paths.size()));
  if (threads <= 1) {
    for (size_t i = 0; i < paths.size(); ++i) {
      InputFile in(paths[i], limits);
      world =
          std::max(world, import_kineto_rank(t, in, limits, {}, static_cast<int32_t>(i), summary));
    }
  } else {
    // One file per task, `threads` at a time, each into its own trace;
    // merged in command-line order, so errors and ranks come out as the
    // sequential import's.
    struct Part {
      Trace trace;
      KinetoImportSummary summary;
      int32_t world = 0;
      std::exception_ptr error;
    };
    std::vector<Part> parts(paths.size());
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < paths.size();) {
        try {
          InputFile in(paths[i], limits);
          parts[i].world = import_kineto_rank(parts[i].trace, in, limits, {},
                                              static_cast<int32_t>(i), &parts[i].summary);
        } catch (...) {
          parts[i].error = std::current_exception();
        }
      }
    };
    std::vector<std::thread> pool;
    for (int k = 1; k < threads; ++k) pool.emplace_back(work);
    work();
    for (std::thread& th : pool) th.join();
    for (size_t i = 0; i < paths.size(); ++i) {
      Part& p = parts[i];
      if (p.error) std::rethrow_exception(p.error);
      for (const RankTrace& r : p.trace.ranks)
        if (t.find_rank(r.rank))
          throw TraceError(ErrorKind::schema, paths[i], "/distributedInfo/rank",
                           "rank " + std::to_string(r.rank) + " appears in two files");
      merge_ranks(t, p.trace);
      if (t.meta.hardware.empty()) t.meta.hardware = p.trace.meta.hardware;
      for (const auto& [tool, version] : p.trace.meta.tool_versions)
        t.meta.tool_versions[tool] = version;
      world = std::max(world, p.world);
      if (summary) {
        summary->device_events += p.summary.device_events;
        summary->host_events += p.summary.host_events;
        summary->launch_links += p.summary.launch_links;
        summary->unlinked_device += p.summary.unlinked_device;
        summary->kernels_with_flops += p.summary.kernels_with_flops;
        summary->memory_records += p.summary.memory_records;
        summary->text_window_bytes =
            std::max(summary->text_window_bytes, p.summary.text_window_bytes);
        for (const auto& [cat, n] : p.summary.skipped) summary->skipped[cat] += n;
      }
      p.trace = Trace();  // its events now live in `t`
    }
  }
  finish_trace(t, world, paths.size() == 1 ? paths[0] : "kineto import");
  return t;
}

}  // namespace shardscope::traces
