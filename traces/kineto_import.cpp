#include "traces/kineto_import.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "traces/error.h"
#include "traces/file_io.h"
#include "traces/json_stream.h"
#include "traces/kernel_names.h"

namespace shardscope::traces {

using nlohmann::json;

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

bool contains(std::string_view s, std::string_view needle) {
  return s.find(needle) != std::string_view::npos;
}

Category memcpy_category(std::string_view name) {
  if (contains(name, "HtoD")) return Category::memcpy_h2d;
  if (contains(name, "DtoH")) return Category::memcpy_d2h;
  return Category::memcpy_d2d;  // DtoD, PtoP (peer), and anything else
}

// A value that is an integer, or a string of digits ("rank": "3" as some
// Kineto versions write it). False otherwise.
bool as_int(const json& v, int64_t* out) {
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(v.get<uint64_t>());
    return true;
  }
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s.empty() || s.size() > 18) return false;
    int64_t n = 0;
    for (char c : s) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
      n = n * 10 + (c - '0');
    }
    *out = n;
    return true;
  }
  return false;
}

struct PendingEvent {
  Event event;  // lane = index into lane_keys_
  int32_t device;
};

struct LaneInfo {
  std::string key;  // pid/tid as JSON text
  int32_t stream = -1;
  int32_t device = -1;
  int64_t compute = 0, comm = 0, copies = 0;
};

class KinetoReader {
 public:
  KinetoReader(Trace& t, const std::string& file) : t_(t), file_(file) {}

  int32_t read(std::string_view text, int32_t fallback_rank) {
    json root = parse_json_streaming(
        text, file_, [this](const JsonParents& p, json& v) { return on_container(p, v); });
    int64_t base = 0;
    int32_t rank = fallback_rank;
    int32_t world = 0;
    if (root.is_object()) {
      JsonFields top(root, "/", file_);
      if (!root.contains("traceEvents")) top.fail("traceEvents", "missing");
      if (!root.at("traceEvents").is_array()) top.fail("traceEvents", "expected an array");
      base = top.get_int("baseTimeNanoseconds", false, 0, 0, INT64_MAX / 2);
      if (const json* dist = top.get_object("distributedInfo", false)) {
        int64_t v = 0;
        if (dist->contains("rank")) {
          if (!as_int(dist->at("rank"), &v) || v < 0 || v > INT32_MAX)
            top.fail("distributedInfo", "rank is not a non-negative integer");
          rank = static_cast<int32_t>(v);
        }
        if (dist->contains("world_size")) {
          if (!as_int(dist->at("world_size"), &v) || v < 0 || v > INT32_MAX)
            top.fail("distributedInfo", "world_size is not a non-negative integer");
          world = static_cast<int32_t>(v);
        }
      }
      if (root.contains("schemaVersion")) {
        int64_t v = 0;
        if (as_int(root.at("schemaVersion"), &v))
          t_.meta.tool_versions["kineto_schema"] = std::to_string(v);
      }
      device_names_ = root.value("deviceProperties", json::array());
    } else if (!root.is_array()) {
      throw TraceError(ErrorKind::schema, file_, "/",
                       "expected a Kineto trace object (or an array of events)");
    }
    build_rank(rank, base);
    return world;
  }

 private:
  bool on_container(const JsonParents& p, json& v) {
    const bool in_object_form =
        p.size() == 2 && !p[0].is_array && p[0].key == "traceEvents" && p[1].is_array;
    const bool in_array_form = p.size() == 1 && p[0].is_array;
    if ((in_object_form || in_array_form) && v.is_object()) {
      read_event(v, json_path(p));
      return false;
    }
    return true;
  }

  // ts and dur in microseconds (floats) -> ns.
  int64_t micros_to_ns(const JsonFields& f, const char* key, bool required) {
    const double us = f.get_double(key, required, 0);
    if (!(std::fabs(us) < 4.0e15)) f.fail(key, "timestamp out of range");
    return std::llround(us * 1000.0);
  }

  uint32_t lane_for(const json& ev) {
    const std::string key = ev.value("pid", json()).dump() + "/" + ev.value("tid", json()).dump();
    auto it = lane_index_.find(key);
    if (it != lane_index_.end()) return it->second;
    const auto id = static_cast<uint32_t>(lanes_.size());
    lanes_.push_back(LaneInfo{key});
    lane_index_.emplace(key, id);
    return id;
  }

  void read_event(const json& ev, const std::string& where) {
    JsonFields f(ev, where, file_);
    const json* ph_value = f.has("ph") ? &ev.at("ph") : nullptr;
    if (!ph_value || !ph_value->is_string()) return;  // not a trace event we read
    const std::string& ph = ph_value->get_ref<const std::string&>();
    const std::string name =
        f.has("name") && ev.at("name").is_string() ? ev.at("name").get<std::string>() : "";
    const std::string cat =
        f.has("cat") && ev.at("cat").is_string() ? ev.at("cat").get<std::string>() : "";

    if (ph == "M") {
      if (name == "thread_name") {
        const json* args = f.get_object("args", false);
        if (args && args->contains("name") && args->at("name").is_string())
          thread_names_[ev.value("pid", json()).dump() + "/" + ev.value("tid", json()).dump()] =
              args->at("name").get<std::string>();
      }
      return;
    }
    if ((ph == "i" || ph == "I") && name == "[memory]") {
      read_memory(ev, f, where);
      return;
    }
    if (ph != "X") return;

    int64_t step = 0;
    if (!iequals(cat, "gpu_user_annotation") && parse_profiler_step(name, &step)) {
      const int64_t start = micros_to_ns(f, "ts", true);
      const int64_t dur = micros_to_ns(f, "dur", true);
      if (dur < 0) f.fail("dur", "negative duration");
      steps_.push_back(Step{step, start, start + dur});
      return;
    }

    Category category;
    if (iequals(cat, "kernel")) {
      category = kernel_category(name);  // NCCL kernels: comm.* (traces/kernel_names.h)
    } else if (iequals(cat, "gpu_memcpy") || iequals(cat, "memcpy")) {
      category = memcpy_category(name);
    } else if (iequals(cat, "gpu_memset") || iequals(cat, "memset")) {
      category = Category::memset;
    } else if (iequals(cat, "cuda_sync")) {
      category = Category::sync;
    } else {
      return;  // host-side events (cpu_op, cuda_runtime, python_function, ...) are not imported
    }

    Event e;
    e.start_ns = micros_to_ns(f, "ts", true);
    e.dur_ns = micros_to_ns(f, "dur", true);
    if (e.dur_ns < 0) f.fail("dur", "negative duration");
    std::string shown_name = name;
    int32_t device = -1;
    int32_t stream = -1;
    if (const json* args = f.get_object("args", false)) {
      JsonFields a(*args, where + "/args", file_);
      e.correlation = static_cast<uint32_t>(a.get_uint("correlation", false, 0, UINT32_MAX));
      if (a.has("bytes") && args->at("bytes").is_number_integer())
        e.bytes = a.get_uint("bytes", false);
      if (a.has("flops")) e.flops = a.get_uint("flops", false);
      if (a.has("device"))
        device = static_cast<int32_t>(a.get_int("device", false, -1, -1, INT32_MAX));
      if (a.has("stream"))
        stream = static_cast<int32_t>(a.get_int("stream", false, -1, INT32_MIN, INT32_MAX));
      if (a.has("unit")) e.unit = t_.intern(a.get_string("unit", false));
      if (a.has("op")) e.op = t_.intern(a.get_string("op", false));
      if (a.has("shardscope_name")) shown_name = a.get_string("shardscope_name", false);
      if (a.has("shardscope_category")) {
        const std::string c = a.get_string("shardscope_category", false);
        if (!parse_category(c, &category))
          a.fail("shardscope_category", "unknown category \"" + c + "\"");
      }
    }
    int64_t id = 0;
    if (device < 0 && ev.contains("pid") && as_int(ev.at("pid"), &id) && id <= INT32_MAX)
      device = static_cast<int32_t>(id);
    if (stream < 0 && ev.contains("tid") && as_int(ev.at("tid"), &id) && id <= INT32_MAX)
      stream = static_cast<int32_t>(id);
    e.name = t_.intern(shown_name);
    e.category = category;
    e.lane = lane_for(ev);
    LaneInfo& lane = lanes_[e.lane];
    if (lane.stream < 0) lane.stream = stream;
    if (lane.device < 0) lane.device = device;
    if (is_compute(category)) ++lane.compute;
    if (is_comm(category)) ++lane.comm;
    if (is_copy(category)) ++lane.copies;
    if (device >= 0) ++device_events_[device];
    events_.push_back(PendingEvent{e, device});
  }

  void read_memory(const json& ev, const JsonFields& f, const std::string& where) {
    const json* args = f.get_object("args", false);
    if (!args) return;
    JsonFields a(*args, where + "/args", file_);
    const int64_t device = a.get_int("Device Id", false, -1, INT32_MIN, INT32_MAX);
    if (device < 0) return;  // host memory
    (void)ev;
    MemoryEvent m;
    m.time_ns = micros_to_ns(f, "ts", true);
    m.bytes = a.get_int("Bytes", false);
    m.allocated = a.get_int("Total Allocated", true);
    m.reserved = a.get_int("Total Reserved", true);
    m.address = a.get_uint("Addr", false);
    if (a.has("shardscope_category")) {
      const std::string c = a.get_string("shardscope_category", false);
      if (!parse_memory_category(c, &m.category))
        a.fail("shardscope_category", "unknown memory category \"" + c + "\"");
    }
    memory_.push_back({m, static_cast<int32_t>(device)});
  }

  void build_rank(int32_t rank, int64_t base) {
    if (t_.find_rank(rank))
      throw TraceError(ErrorKind::schema, file_, "/distributedInfo/rank",
                       "rank " + std::to_string(rank) + " appears in two files");
    RankTrace& r = t_.add_rank(rank);
    // The rank's device: the one most GPU events ran on, else the first with memory records.
    int64_t best = 0;
    for (const auto& [d, n] : device_events_)
      if (n > best) {
        best = n;
        r.device = d;
      }
    if (r.device < 0 && !memory_.empty()) r.device = memory_.front().second;

    // Lanes in display order (compute, comm, copies, other; then by stream).
    std::vector<uint32_t> order(lanes_.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    auto kind_of = [](const LaneInfo& l) {
      if (l.compute) return LaneKind::compute;
      if (l.comm) return LaneKind::comm;
      if (l.copies) return LaneKind::copy;
      return LaneKind::other;
    };
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      const LaneKind ka = kind_of(lanes_[a]), kb = kind_of(lanes_[b]);
      if (ka != kb) return ka < kb;
      return lanes_[a].stream < lanes_[b].stream;
    });
    bool many_devices = false;
    for (const LaneInfo& l : lanes_) many_devices |= l.device != lanes_.front().device;
    std::vector<uint32_t> new_index(lanes_.size());
    std::set<std::string> used_names;
    for (uint32_t i = 0; i < order.size(); ++i) {
      const LaneInfo& l = lanes_[order[i]];
      new_index[order[i]] = i;
      std::string name;
      auto named = thread_names_.find(l.key);
      if (named != thread_names_.end()) {
        name = named->second;
      } else {
        name = "stream " + std::to_string(l.stream);
        if (many_devices) name = "gpu " + std::to_string(l.device) + " " + name;
      }
      // Two lanes must not share a name.
      std::string unique = name;
      for (int k = 2; used_names.count(unique); ++k) unique = name + " #" + std::to_string(k);
      used_names.insert(unique);
      r.lanes.push_back(Lane{t_.intern(unique), kind_of(l), l.stream});
    }
    auto shift = [&](int64_t ns, const std::string& where) {
      if (ns > INT64_MAX - base || ns < INT64_MIN + base)
        throw TraceError(ErrorKind::schema, file_, where, "timestamp out of range");
      return ns + base;
    };
    r.events.reserve(events_.size());
    for (PendingEvent& p : events_) {
      p.event.lane = new_index[p.event.lane];
      p.event.start_ns = shift(p.event.start_ns, "/traceEvents");
      if (p.event.start_ns > INT64_MAX - p.event.dur_ns)
        throw TraceError(ErrorKind::schema, file_, "/traceEvents", "event end out of range");
      r.events.push_back(p.event);
    }
    for (auto& [m, device] : memory_) {
      if (device != r.device) continue;  // another GPU's memory (one rank per file)
      m.time_ns = shift(m.time_ns, "/traceEvents");
      r.memory.push_back(m);
    }
    std::sort(steps_.begin(), steps_.end(), [](const Step& a, const Step& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.number < b.number;
    });
    for (size_t i = 0; i < steps_.size(); ++i) {
      const Step& s = steps_[i];
      if (i > 0 && steps_[i - 1].start_ns == s.start_ns && steps_[i - 1].number == s.number)
        continue;  // the same annotation twice
      r.steps.push_back(
          Step{s.number, shift(s.start_ns, "/traceEvents"), shift(s.end_ns, "/traceEvents")});
    }
    sort_events(r);
    for (const json& d : device_names_) {
      if (!d.is_object() || !d.contains("id") || !d.contains("name") || !d.at("name").is_string())
        continue;
      int64_t id = 0;
      if (as_int(d.at("id"), &id) && id == r.device && t_.meta.hardware.empty())
        t_.meta.hardware = d.at("name").get<std::string>();
    }
  }

  Trace& t_;
  const std::string& file_;
  std::vector<LaneInfo> lanes_;
  std::map<std::string, uint32_t> lane_index_;
  std::map<std::string, std::string> thread_names_;
  std::map<int32_t, int64_t> device_events_;
  std::vector<PendingEvent> events_;
  std::vector<std::pair<MemoryEvent, int32_t>> memory_;
  std::vector<Step> steps_;
  json device_names_;
};

}  // namespace

int32_t import_kineto_rank(Trace& t, std::string_view text, const std::string& name,
                           int32_t fallback_rank) {
  return KinetoReader(t, name).read(text, fallback_rank);
}

Trace import_kineto_text(std::string_view text, const std::string& name) {
  Trace t;
  t.meta.source = Source::kineto;
  t.meta.clock_alignment = "none: Kineto baseTimeNanoseconds + ts, as recorded";
  const int32_t world = import_kineto_rank(t, text, name, 0);
  t.meta.world_size = std::max(world, static_cast<int32_t>(t.ranks.size()));
  validate(t, name);
  return t;
}

Trace import_kineto(const std::vector<std::string>& paths) {
  Trace t;
  t.meta.source = Source::kineto;
  t.meta.clock_alignment = "none: Kineto baseTimeNanoseconds + ts, as recorded";
  int32_t world = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string text = read_file(paths[i]);
    world = std::max(world, import_kineto_rank(t, text, paths[i], static_cast<int32_t>(i)));
  }
  std::sort(t.ranks.begin(), t.ranks.end(),
            [](const RankTrace& a, const RankTrace& b) { return a.rank < b.rank; });
  t.meta.world_size = std::max(world, static_cast<int32_t>(t.ranks.size()));
  validate(t, paths.size() == 1 ? paths[0] : "kineto import");
  return t;
}

}  // namespace shardscope::traces
