#include "traces/chrome_export.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>

#include "traces/chrome_names.h"
#include "traces/error.h"
#include "traces/file_io.h"
#include "traces/json_format.h"

namespace shardscope::traces {

namespace {

int lane_order(LaneKind k) {
  switch (k) {
    case LaneKind::host:
      return 0;
    case LaneKind::compute:
      return 1;
    case LaneKind::comm:
      return 2;
    case LaneKind::copy:
      return 3;
    case LaneKind::other:
      return 4;
  }
  return 5;
}

// A complete ("X") event to place on a thread: an event of the trace or a
// step annotation.
struct Item {
  int64_t start;
  int64_t end;
  uint32_t event;    // index into RankTrace::events, or kNoEvent
  int64_t step;      // step number for annotations
  uint32_t sub = 0;  // sub-lane (thread) it was placed on
};
constexpr uint32_t kNoEvent = 0xffffffffu;

// Places items on the fewest sub-lanes such that on each, any two items are
// disjoint or nested (first fit, in start order with longer first).
uint32_t place(std::vector<Item>& items) {
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.start != b.start) return a.start < b.start;
    if (a.end != b.end) return a.end > b.end;
    return (a.event == kNoEvent) > (b.event == kNoEvent);  // annotations enclose
  });
  std::vector<std::vector<int64_t>> open;  // per sub-lane: ends of the open chain
  for (Item& it : items) {
    uint32_t k = 0;
    for (; k < open.size(); ++k) {
      auto& chain = open[k];
      while (!chain.empty() && chain.back() <= it.start) chain.pop_back();
      if (chain.empty() || chain.back() >= it.end) break;
    }
    if (k == open.size()) open.emplace_back();
    open[k].push_back(it.end);
    it.sub = k;
  }
  return static_cast<uint32_t>(std::max<size_t>(open.size(), 1));
}

struct OutLane {
  int32_t lane;  // model lane, -1 for a synthesised host thread
  uint32_t sub;  // 0 = the lane itself, k = "name (k+1)"
  int tid;
};

class Exporter {
 public:
  Exporter(const Trace& t, OutBuffer& out) : t_(t), out_(out) {}

  void write(const std::vector<int32_t>& ranks) {
    std::vector<const RankTrace*> chosen;
    for (const RankTrace& r : t_.ranks)
      if (ranks.empty() || std::find(ranks.begin(), ranks.end(), r.rank) != ranks.end())
        chosen.push_back(&r);
    base_ = base_time();
    out_.put("{\"schemaVersion\":1,\n\"deviceProperties\":[");
    std::set<int32_t> devices;
    for (const RankTrace* r : chosen)
      if (r->device >= 0) devices.insert(r->device);
    bool first = true;
    for (int32_t d : devices) {
      out_.put(first ? "\n" : ",\n");
      first = false;
      out_.put("{\"id\":");
      out_.put_int(d);
      out_.put(",\"name\":");
      out_.put_string(t_.meta.hardware, true);
      out_.put('}');
    }
    out_.put("],\n\"distributedInfo\":{\"backend\":\"");
    out_.put(t_.meta.source == Source::engine_cpu ? "gloo" : "nccl");
    out_.put("\",\"rank\": ");  // HTA finds the rank with "rank":\s+(\d+): keep the blank
    out_.put_int(chosen.empty() ? 0 : chosen.front()->rank);
    out_.put(",\"world_size\":");
    out_.put_int(t_.world_size());
    out_.put("},\n\"displayTimeUnit\":\"ms\",\n\"baseTimeNanoseconds\":");
    out_.put_int(base_);
    out_.put(",\n\"traceEvents\":[");
    for (const RankTrace* r : chosen) write_rank(*r);
    out_.put("\n],\n\"shardscope\":{\"source\":");
    out_.put_string(source_name(t_.meta.source), true);
    out_.put(",\"model\":");
    out_.put_string(t_.meta.model, true);
    out_.put(",\"hardware\":");
    out_.put_string(t_.meta.hardware, true);
    out_.put(",\"world_size\":");
    out_.put_int(t_.world_size());
    out_.put(",\"clock_alignment\":");
    out_.put_string(t_.meta.clock_alignment, true);
    out_.put("}}\n");
    out_.flush();
  }

 private:
  int64_t base_time() const {
    int64_t base = std::numeric_limits<int64_t>::max();
    for (const RankTrace& r : t_.ranks) {
      for (const Event& e : r.events) base = std::min(base, e.start_ns);
      for (const MemoryEvent& m : r.memory) base = std::min(base, m.time_ns);
      for (const Step& s : r.steps) base = std::min(base, s.start_ns);
    }
    return base == std::numeric_limits<int64_t>::max() ? 0 : base;
  }

  void begin_event() {
    out_.put(first_event_ ? "\n" : ",\n");
    first_event_ = false;
  }

  // ns - base_, never negative (base_ is the minimum), in unsigned arithmetic
  // so that extreme times cannot overflow.
  static uint64_t span(int64_t from, int64_t to) {
    return static_cast<uint64_t>(to) - static_cast<uint64_t>(from);
  }

  void put_ts(int64_t ns) {
    out_.put(",\"ts\":");
    out_.put_micros_unsigned(span(base_, ns));
  }

  void put_where(int32_t pid, int tid) {
    out_.put(",\"pid\":");
    out_.put_int(pid);
    out_.put(",\"tid\":");
    out_.put_int(tid);
  }

  void metadata(const char* name, int32_t pid, int tid, const char* arg, const std::string* text,
                int64_t number) {
    begin_event();
    out_.put("{\"name\":\"");
    out_.put(name);
    out_.put("\",\"ph\":\"M\"");
    put_where(pid, tid);
    out_.put(",\"args\":{\"");
    out_.put(arg);
    out_.put("\":");
    if (text) {
      out_.put_string(*text, true);
    } else {
      out_.put_int(number);
    }
    out_.put("}}");
  }

  void write_rank(const RankTrace& r) {
    const int32_t pid = r.rank;
    // Items per lane, then sub-lanes.
    std::vector<std::vector<Item>> items(r.lanes.size());
    for (uint32_t i = 0; i < r.events.size(); ++i) {
      const Event& e = r.events[i];
      items[e.lane].push_back(Item{e.start_ns, e.start_ns + e.dur_ns, i, 0, 0});
    }
    int32_t host = -1;
    for (size_t l = 0; l < r.lanes.size(); ++l)
      if (r.lanes[l].kind == LaneKind::host) {
        host = static_cast<int32_t>(l);
        break;
      }
    // No gpu_user_annotation copy of the steps on device lanes: HTA takes any
    // "ProfilerStep" row as a step and would move its last-step cutoff.
    std::vector<Item> host_synth;
    const bool need_host = host < 0 && (!r.steps.empty() || !r.memory.empty());
    std::vector<Item>& host_items = host >= 0 ? items[static_cast<size_t>(host)] : host_synth;
    for (const Step& s : r.steps)
      host_items.push_back(Item{s.start_ns, s.end_ns, kNoEvent, s.number, 0});

    std::vector<uint32_t> subs(r.lanes.size());
    for (size_t l = 0; l < r.lanes.size(); ++l) subs[l] = place(items[l]);
    const uint32_t host_synth_subs = need_host ? place(host_synth) : 0;

    // Threads in display order: host, compute, comm, copies, other.
    std::vector<size_t> order(r.lanes.size());
    for (size_t l = 0; l < order.size(); ++l) order[l] = l;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return lane_order(r.lanes[a].kind) < lane_order(r.lanes[b].kind);
    });
    std::vector<OutLane> threads;
    std::vector<std::vector<int>> tid_of(r.lanes.size());
    int next_tid = 1;
    for (uint32_t k = 0; k < host_synth_subs; ++k) threads.push_back(OutLane{-1, k, next_tid++});
    for (size_t l : order) {
      for (uint32_t k = 0; k < subs[l]; ++k) {
        tid_of[l].push_back(next_tid);
        threads.push_back(OutLane{static_cast<int32_t>(l), k, next_tid++});
      }
    }
    const int host_tid = need_host ? 1 : (host >= 0 ? tid_of[static_cast<size_t>(host)][0] : 0);
    const std::vector<Launch> launches = plan_launches(r);

    const std::string process = "rank " + std::to_string(r.rank);
    metadata("process_name", pid, 0, "name", &process, 0);
    metadata("process_sort_index", pid, 0, "sort_index", nullptr, r.rank);
    for (size_t i = 0; i < threads.size(); ++i) {
      const OutLane& th = threads[i];
      std::string name =
          th.lane < 0 ? "host" : std::string(t_.str(r.lanes[static_cast<size_t>(th.lane)].name));
      if (th.sub > 0) name += " (" + std::to_string(th.sub + 1) + ")";
      metadata("thread_name", pid, th.tid, "name", &name, 0);
      metadata("thread_sort_index", pid, th.tid, "sort_index", nullptr, static_cast<int64_t>(i));
    }

    for (size_t l = 0; l < r.lanes.size(); ++l)
      for (const Item& it : items[l]) write_item(r, l, it, tid_of[l][it.sub]);
    for (const Item& it : host_synth)
      write_step_annotation(pid, 1 + static_cast<int>(it.sub), it, false);
    if (!launches.empty()) {
      const int tid = next_tid++;
      const std::string name = "launches (synthesized)";
      metadata("thread_name", pid, tid, "name", &name, 0);
      metadata("thread_sort_index", pid, tid, "sort_index", nullptr,
               static_cast<int64_t>(threads.size()));
      for (const Launch& l : launches) write_launch(r, l, tid);
    }

    write_memory(r, host_tid);
    write_flows(r, items, tid_of);
  }

  struct Launch {
    int64_t ts;
    uint32_t event;
  };

  // Kineto readers (HTA) find a kernel's step through the host call that
  // launched it. Device work without a launch in the trace (simulated and
  // engine runs) gets a synthesized cuda_runtime call with its correlation
  // id, at the kernel's start clamped into the host range of its step
  // (steps[k].start <= ts < steps[k].end, HTA's host rule), so HTA puts it
  // in the step the trace does. The importer drops them again
  // (args.shardscope_synthesized). Fills correlation_ for every event.
  std::vector<Launch> plan_launches(const RankTrace& r) {
    correlation_.assign(r.events.size(), 0);
    std::vector<bool> launched(r.events.size(), false);
    for (const Flow& f : r.flows)
      if (is_launch_flow(r, f)) launched[f.to] = true;
    uint32_t next = 1;
    for (const Event& e : r.events) next = std::max(next, e.correlation + 1);
    std::vector<Launch> out;
    for (uint32_t i = 0; i < r.events.size(); ++i) {
      const Event& e = r.events[i];
      correlation_[i] = e.correlation;
      if (r.lanes[e.lane].kind == LaneKind::host || launched[i]) continue;
      if (e.category == Category::marker || e.category == Category::sync ||
          e.category == Category::host)
        continue;
      if (!correlation_[i]) correlation_[i] = next++;
      int64_t ts = e.start_ns;
      auto s = std::upper_bound(r.steps.begin(), r.steps.end(), e.start_ns,
                                [](int64_t x, const Step& st) { return x < st.start_ns; });
      if (s != r.steps.begin()) {
        const Step& step = *(s - 1);
        const int64_t hi = std::max(step.start_ns, step.end_ns - 1000);
        ts = std::min(std::max(ts, step.start_ns), hi);
      }
      out.push_back(Launch{ts, i});
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const Launch& a, const Launch& b) { return a.ts < b.ts; });
    return out;
  }

  void write_launch(const RankTrace& r, const Launch& l, int tid) {
    begin_event();
    out_.put("{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\"");
    put_where(r.rank, tid);
    put_ts(l.ts);
    out_.put(",\"dur\":0.000,\"args\":{\"correlation\":");
    out_.put_uint(correlation_[l.event]);
    // 1: the correlation id was made up too (the kernel had none), 2: the kernel's own.
    out_.put(r.events[l.event].correlation ? ",\"shardscope_synthesized\":2}}"
                                           : ",\"shardscope_synthesized\":1}}");
  }

  void write_step_annotation(int32_t pid, int tid, const Item& it, bool device) {
    begin_event();
    out_.put("{\"ph\":\"X\",\"cat\":\"");
    out_.put(device ? "gpu_user_annotation" : "user_annotation");
    out_.put("\",\"name\":\"ProfilerStep#");
    out_.put_int(it.step);
    out_.put('"');
    put_where(pid, tid);
    put_ts(it.start);
    out_.put(",\"dur\":");
    out_.put_micros_unsigned(span(it.start, it.end));
    out_.put('}');
  }

  void write_item(const RankTrace& r, size_t lane, const Item& it, int tid) {
    const Lane& l = r.lanes[lane];
    const bool device = l.kind != LaneKind::host;
    if (it.event == kNoEvent) {
      write_step_annotation(r.rank, tid, it, device);
      return;
    }
    const Event& e = r.events[it.event];
    const std::string_view name = t_.str(e.name);
    const KinetoShown shown = kineto_shown_as(e, name, t_.str(e.op), device);
    begin_event();
    out_.put("{\"ph\":\"X\",\"cat\":\"");
    out_.put(shown.cat);
    out_.put("\",\"name\":");
    out_.put_string(shown.name, true);
    put_where(r.rank, tid);
    put_ts(e.start_ns);
    out_.put(",\"dur\":");
    out_.put_micros(e.dur_ns);
    out_.put(",\"args\":{");
    // Markers and syncs on device lanes carry no stream: HTA counts every row
    // with a stream as device busy time, and they are not.
    const bool busy = e.category != Category::marker && e.category != Category::sync;
    if (device && busy) {
      out_.put("\"device\":");
      out_.put_int(r.device >= 0 ? r.device : 0);
      out_.put(",\"stream\":");
      out_.put_int(l.stream >= 0 ? l.stream : 100 + static_cast<int64_t>(lane));
      out_.put(",\"correlation\":");
      out_.put_uint(correlation_[it.event]);
      out_.put(',');
    } else if (device) {
      out_.put("\"device\":");
      out_.put_int(r.device >= 0 ? r.device : 0);
      out_.put(",\"shardscope_stream\":");
      out_.put_int(l.stream >= 0 ? l.stream : 100 + static_cast<int64_t>(lane));
      out_.put(',');
      if (e.correlation) {
        out_.put("\"correlation\":");
        out_.put_uint(e.correlation);
        out_.put(',');
      }
    } else if (e.correlation) {
      out_.put("\"correlation\":");
      out_.put_uint(e.correlation);
      out_.put(',');
    }
    out_.put("\"shardscope_category\":\"");
    out_.put(category_name(e.category));
    out_.put('"');
    if (shown.renamed) {
      out_.put(",\"shardscope_name\":");
      out_.put_string(name, true);
    }
    write_event_fields_json(t_, e, out_, true);
    out_.put("}}");
  }

  void write_memory(const RankTrace& r, int host_tid) {
    const int device_type = t_.meta.source == Source::engine_cpu ? 0 : 1;
    for (const MemoryEvent& m : r.memory) {
      begin_event();
      out_.put("{\"ph\":\"C\",\"name\":\"memory\"");
      put_where(r.rank, 0);
      put_ts(m.time_ns);
      out_.put(",\"args\":{\"allocated\":");
      out_.put_int(m.allocated);
      out_.put(",\"reserved\":");
      out_.put_int(m.reserved);
      out_.put("}}");
      begin_event();
      out_.put("{\"ph\":\"i\",\"cat\":\"cpu_instant_event\",\"s\":\"t\",\"name\":\"[memory]\"");
      put_where(r.rank, host_tid);
      put_ts(m.time_ns);
      out_.put(",\"args\":{\"Device Type\":");
      out_.put_int(device_type);
      out_.put(",\"Device Id\":");
      out_.put_int(r.device >= 0 ? r.device : 0);
      out_.put(",\"Addr\":");
      out_.put_uint(m.address);
      out_.put(",\"Bytes\":");
      out_.put_int(m.bytes);
      out_.put(",\"Total Allocated\":");
      out_.put_int(m.allocated);
      out_.put(",\"Total Reserved\":");
      out_.put_int(m.reserved);
      out_.put(",\"shardscope_category\":\"");
      out_.put(memory_category_name(m.category));
      out_.put("\"}}");
    }
  }

  void write_flows(const RankTrace& r, const std::vector<std::vector<Item>>& items,
                   const std::vector<std::vector<int>>& tid_of) {
    if (r.flows.empty()) return;
    // Thread of each event after placement.
    std::vector<int> event_tid(r.events.size(), 0);
    for (size_t l = 0; l < items.size(); ++l)
      for (const Item& it : items[l])
        if (it.event != kNoEvent) event_tid[it.event] = tid_of[l][it.sub];
    for (const Flow& f : r.flows) {
      const uint64_t id = ++flow_id_;
      const Event& from = r.events[f.from];
      const Event& to = r.events[f.to];
      // Launches as Kineto draws them (cat ac2g); other links as dependencies.
      const char* what = is_launch_flow(r, f) ? "\"cat\":\"ac2g\",\"name\":\"ac2g\""
                                              : "\"cat\":\"flow\",\"name\":\"dependency\"";
      begin_event();
      out_.put("{\"ph\":\"s\",\"id\":");
      out_.put_uint(id);
      put_where(r.rank, event_tid[f.from]);
      put_ts(from.start_ns);
      out_.put(',');
      out_.put(what);
      out_.put('}');
      begin_event();
      out_.put("{\"ph\":\"f\",\"id\":");
      out_.put_uint(id);
      put_where(r.rank, event_tid[f.to]);
      put_ts(to.start_ns);
      out_.put(',');
      out_.put(what);
      out_.put(",\"bp\":\"e\"}");
    }
  }

  const Trace& t_;
  OutBuffer& out_;
  int64_t base_ = 0;
  bool first_event_ = true;
  uint64_t flow_id_ = 0;
  std::vector<uint32_t> correlation_;  // per event of the rank being written
};

}  // namespace

void write_chrome_trace(const Trace& t, OutBuffer& out, const std::vector<int32_t>& ranks) {
  validate(t);
  Exporter(t, out).write(ranks);
}

std::string chrome_trace_string(const Trace& t, const std::vector<int32_t>& ranks) {
  std::string s;
  OutBuffer out(&s);
  write_chrome_trace(t, out, ranks);
  return s;
}

void export_chrome(const Trace& t, const std::string& path) {
  validate(t, path);
  OutputFile file(path);
  OutBuffer out(&file);
  write_chrome_trace(t, out);
  file.commit();
}

std::vector<std::string> export_chrome_per_rank(const Trace& t, const std::string& dir) {
  validate(t, dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw TraceError(ErrorKind::io, dir, "", "cannot create the output folder");
  std::vector<std::unique_ptr<OutputFile>> files;
  std::vector<std::string> paths;
  for (const RankTrace& r : t.ranks) {
    paths.push_back(
        (std::filesystem::path(dir) / ("rank" + std::to_string(r.rank) + ".json")).string());
    files.push_back(std::make_unique<OutputFile>(paths.back()));
    OutBuffer out(files.back().get());
    write_chrome_trace(t, out, {r.rank});
  }
  for (auto& f : files) f->commit();
  return paths;
}

}  // namespace shardscope::traces
