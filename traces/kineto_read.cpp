#include "traces/kineto_read.h"

#include "traces/binary_format.h"
#include "traces/error.h"
#include "traces/json_scan.h"
#include "traces/kernel_names.h"

namespace shardscope::traces::kineto {

namespace {

// ASCII case-insensitive (`b` is lower case; Kineto's cats are ASCII).
bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char c = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    if (c != b[i]) return false;
  }
  return true;
}

bool contains(std::string_view s, std::string_view needle) {
  return s.find(needle) != std::string_view::npos;
}

Kind kind_of_cat(std::string_view cat) {
  if (iequals(cat, "kernel")) return Kind::kernel;
  if (iequals(cat, "gpu_memcpy") || iequals(cat, "memcpy")) return Kind::gpu_memcpy;
  if (iequals(cat, "gpu_memset") || iequals(cat, "memset")) return Kind::gpu_memset;
  if (iequals(cat, "cuda_sync")) return Kind::cuda_sync;
  if (iequals(cat, "gpu_user_annotation")) return Kind::gpu_annotation;
  if (iequals(cat, "mtia_ccp_events")) return Kind::mtia_device;
  if (iequals(cat, "cpu_op")) return Kind::cpu_op;
  if (iequals(cat, "user_annotation")) return Kind::user_annotation;
  if (iequals(cat, "cuda_runtime") || iequals(cat, "mtia_runtime") || iequals(cat, "xpu_runtime"))
    return Kind::runtime;
  if (iequals(cat, "cuda_driver")) return Kind::driver;
  return Kind::skipped;
}

Category memcpy_category(std::string_view name) {
  if (contains(name, "HtoD")) return Category::memcpy_h2d;
  if (contains(name, "DtoH")) return Category::memcpy_d2h;
  return Category::memcpy_d2d;  // DtoD, PtoP (peer), and anything else
}

// gloo runs collectives on the host: "gloo:all_reduce", "gloo:barrier"...
// Other backends' host annotations (nccl:, hccl:) only enqueue device work.
bool host_collective(std::string_view name, Category* out) {
  if (name.substr(0, 5) != "gloo:") return false;
  const std::string_view op = name.substr(5);
  if (contains(op, "reduce_scatter")) {
    *out = Category::comm_reduce_scatter;
  } else if (contains(op, "all_reduce") || contains(op, "allreduce")) {
    *out = Category::comm_all_reduce;
  } else if (contains(op, "all_gather") || contains(op, "allgather")) {
    *out = Category::comm_all_gather;
  } else {
    *out = Category::comm_other;
  }
  return true;
}

// The value at the scanner as an integer: a JSON integer, or a string of
// decimal digits (Kineto writes some ids as strings). False otherwise
// (the value is consumed either way).
bool read_int_like(JsonScanner& s, int64_t* out) {
  switch (s.peek_kind()) {
    case JsonKind::number:
      return parse_json_int(s.number(), out);
    case JsonKind::string: {
      const std::string_view v = s.string();
      if (v.empty() || v.size() > 18) return false;
      for (char c : v)
        if (c < '0' || c > '9') return false;
      return parse_json_int(v, out);
    }
    default:
      s.skip();
      return false;
  }
}

// pid/tid as text: numbers as written, strings as their content.
void read_id_text(JsonScanner& s, std::string* out) {
  switch (s.peek_kind()) {
    case JsonKind::number:
      out->assign(s.number());
      return;
    case JsonKind::string: {
      const std::string_view v = s.string();
      out->assign("\"");
      out->append(v);
      return;
    }
    default:
      s.skip();
      out->assign("?");
  }
}

// Raw JSON text of the value at the scanner (skipped and validated).
std::string_view raw_value(JsonScanner& s) {
  s.peek_kind();
  const size_t from = s.offset();
  s.skip();
  return s.text_since(from);
}

// Streaming (JsonScanner): the reader buffers each top-level member and
// each event whole before reading it, and releases each event once read,
// so no view it takes outlives the window.
class Reader {
 public:
  Reader(std::string_view text, const std::string& file, Trace& t)
      : s_(text, file), file_(file), t_(t) {}
  Reader(JsonScanner::Source source, std::string head, const std::string& file, Trace& t)
      : s_(std::move(source), std::move(head), file), file_(file), t_(t) {}

  Document read() {
    s_.buffer_token();
    if (s_.peek_kind() == JsonKind::array) {
      read_events();  // the bare array form: [event, ...]
    } else if (s_.peek_kind() == JsonKind::object) {
      read_top();
    } else {
      throw TraceError(ErrorKind::schema, file_, "/",
                       "expected a Kineto trace object (or an array of events)");
    }
    s_.finish();
    doc_.text_window_peak = s_.window_peak();
    return std::move(doc_);
  }

 private:
  [[noreturn]] void fail_at(const std::string& path, const std::string& detail) const {
    throw TraceError(ErrorKind::schema, file_, path, detail);
  }

  void read_top() {
    s_.begin_object();
    bool has_events = false;
    std::string_view view;
    std::string key;  // a copy: buffering the value may move the window
    for (bool first = true;;) {
      s_.buffer_member();
      if (!s_.next_member(first, &view)) break;
      if (view == "traceEvents") {
        s_.buffer_token();
        if (s_.peek_kind() != JsonKind::array) fail_at("/traceEvents", "expected an array");
        read_events();
        has_events = true;
        continue;
      }
      key.assign(view);
      s_.buffer_value();
      if (key == "baseTimeNanoseconds") {
        int64_t v = 0;
        if (s_.peek_kind() != JsonKind::number || !parse_json_int(s_.number(), &v) || v < 0 ||
            v > INT64_MAX / 2)
          fail_at("/baseTimeNanoseconds", "expected an integer in [0, 2^62]");
        doc_.base_ns = v;
      } else if (key == "distributedInfo") {
        read_distributed();
      } else if (key == "schemaVersion") {
        int64_t v = 0;
        if (read_int_like(s_, &v)) doc_.schema_version = std::to_string(v);
      } else if (key == "deviceProperties") {
        read_devices();
      } else if (key == "shardscope") {
        doc_.shardscope = true;
        s_.skip();
      } else {
        s_.skip();
      }
    }
    if (!has_events) fail_at("/traceEvents", "missing");
  }

  void read_distributed() {
    if (s_.peek_kind() != JsonKind::object) fail_at("/distributedInfo", "expected an object");
    s_.begin_object();
    std::string_view key;
    for (bool first = true; s_.next_member(first, &key);) {
      int64_t v = 0;
      if (key == "rank") {
        if (!read_int_like(s_, &v) || v < 0 || v > INT32_MAX)
          fail_at("/distributedInfo", "rank is not a non-negative integer");
        doc_.rank = static_cast<int32_t>(v);
      } else if (key == "world_size") {
        if (!read_int_like(s_, &v) || v < 0 || v > INT32_MAX)
          fail_at("/distributedInfo", "world_size is not a non-negative integer");
        doc_.world = static_cast<int32_t>(v);
      } else if (key == "backend" && s_.peek_kind() == JsonKind::string) {
        doc_.backend = std::string(s_.string());
      } else {
        s_.skip();
      }
    }
  }

  void read_devices() {
    if (s_.peek_kind() != JsonKind::array) {
      s_.skip();
      return;
    }
    s_.begin_array();
    for (bool first = true; s_.next_element(first);) {
      if (s_.peek_kind() != JsonKind::object) {
        s_.skip();
        continue;
      }
      s_.begin_object();
      int64_t id = -1;
      bool has_id = false;
      std::string name;
      std::string_view key;
      for (bool f = true; s_.next_member(f, &key);) {
        if (key == "id") {
          has_id = read_int_like(s_, &id);
        } else if (key == "name" && s_.peek_kind() == JsonKind::string) {
          name = std::string(s_.string());
        } else {
          s_.skip();
        }
      }
      if (has_id && !name.empty()) doc_.device_names.emplace_back(id, name);
    }
  }

  void read_events() {
    s_.begin_array();
    size_t index = 0;
    for (bool first = true;; ++index) {
      s_.release();
      s_.buffer_token();
      if (!s_.next_element(first)) break;
      s_.buffer_value();
      if (s_.peek_kind() != JsonKind::object) {
        s_.skip();  // not an event; Kineto writes none, Chrome tolerates them
        continue;
      }
      read_event(index);
    }
  }

  std::string path(size_t index, const char* key) const {
    return "/traceEvents/" + std::to_string(index) + "/" + key;
  }

  // ts/dur: microseconds as decimal text -> integer ns, exactly.
  int64_t micros(size_t index, const char* key, std::string_view text) const {
    int64_t ns = 0;
    if (!decimal_to_scaled_int(text, 3, &ns) || ns > INT64_MAX / 4 || ns < -INT64_MAX / 4)
      fail_at(path(index, key), "timestamp out of range");
    return ns;
  }

  void read_event(size_t index) {
    const size_t offset = s_.offset();
    s_.begin_object();
    std::string_view key;
    std::string_view ts_text, dur_text;
    bool has_ph = false;
    ph_.clear();
    cat_.clear();
    name_.clear();
    pid_ = "?";
    tid_ = "?";
    Args a;
    bool has_args = false;
    for (bool first = true; s_.next_member(first, &key);) {
      if (key.size() == 2 && key == "ph") {
        if (s_.peek_kind() == JsonKind::string) {
          ph_.assign(s_.string());
          has_ph = true;
        } else {
          s_.skip();
        }
      } else if (key == "name") {
        if (s_.peek_kind() == JsonKind::string) {
          name_.assign(s_.string());
        } else {
          s_.skip();
        }
      } else if (key == "cat") {
        if (s_.peek_kind() == JsonKind::string) {
          cat_.assign(s_.string());
        } else {
          s_.skip();
        }
      } else if (key == "ts") {
        if (s_.peek_kind() != JsonKind::number)
          fail_at(path(index, "ts"), "expected a number of microseconds");
        ts_text = s_.number();
      } else if (key == "dur") {
        if (s_.peek_kind() != JsonKind::number)
          fail_at(path(index, "dur"), "expected a number of microseconds");
        dur_text = s_.number();
      } else if (key == "pid") {
        read_id_text(s_, &pid_);
      } else if (key == "tid") {
        read_id_text(s_, &tid_);
      } else if (key == "args") {
        if (s_.peek_kind() != JsonKind::object) {
          s_.skip();
          continue;
        }
        read_args(index, &a);
        has_args = true;
      } else {
        s_.skip();
      }
    }
    if (!has_ph) return;  // not a trace event we read
    if (ph_ == "M") {
      if (has_args && !a.name.empty()) {
        if (name_ == "thread_name") doc_.thread_names[pid_ + "/" + tid_] = a.name;
        if (name_ == "process_name") doc_.process_names[pid_] = a.name;
      }
      return;
    }
    if ((ph_ == "i" || ph_ == "I") && name_ == "[memory]") {
      if (ts_text.empty()) fail_at(path(index, "ts"), "missing");
      read_memory(index, a, micros(index, "ts", ts_text));
      return;
    }
    if (ph_ != "X") return;

    const Kind kind = kind_of_cat(cat_);
    const bool host_kind = kind == Kind::cpu_op || kind == Kind::user_annotation;
    int64_t step_number = 0;
    const bool is_step =
        (host_kind || kind == Kind::gpu_annotation) && parse_profiler_step(name_, &step_number);
    if (a.synthesized) {  // a launch shardscope's export made up for HTA
      if (a.synthesized_id && a.correlation) doc_.invented_correlations.insert(a.correlation);
      return;
    }
    if (kind == Kind::skipped) {
      ++doc_.skipped[cat_.empty() ? std::string("(no cat)") : cat_];
      return;
    }
    if (ts_text.empty()) fail_at(path(index, "ts"), "missing");
    if (dur_text.empty()) fail_at(path(index, "dur"), "missing");
    const int64_t start = micros(index, "ts", ts_text);
    const int64_t dur = micros(index, "dur", dur_text);
    if (dur < 0) fail_at(path(index, "dur"), "negative duration");
    if (is_step) {
      // The device-side copy of a step range only repeats the host's.
      if (host_kind) doc_.steps.push_back(RawStep{Step{step_number, start, start + dur}, pid_});
      return;
    }

    // Rank indices are 32-bit (flows, the binary format): a rank holds at
    // most 2^32 - 1 events.
    if (doc_.events.size() >= kBinaryMaxPerRank)
      fail_at("/traceEvents/" + std::to_string(index),
              "more than 2^32 - 1 events in one file, the most one rank can hold");
    RawEvent raw;  // beside `e`, pushed together at the end
    raw.kind = kind;
    raw.offset = offset;
    raw.correlation = a.correlation;
    raw.external_id = a.external_id;
    if (!a.input_dims.empty() || !a.input_types.empty() || !a.concrete_inputs.empty()) {
      if (doc_.shapes.size() >= RawEvent::kNoShapes)
        fail_at(path(index, "args"), "more than 2^32 - 1 events with record_shapes in one file");
      raw.shapes = static_cast<uint32_t>(doc_.shapes.size());
      doc_.shapes.push_back(RawShapes{std::string(a.input_dims), std::string(a.input_types),
                                      std::string(a.concrete_inputs)});
    }
    Event e = a.event;  // bytes, flops, unit and op are already in it
    e.start_ns = start;
    e.dur_ns = dur;
    e.correlation = static_cast<uint32_t>(a.correlation);
    switch (kind) {
      case Kind::kernel:
        e.category = kernel_category(name_);
        break;
      case Kind::gpu_memcpy:
        e.category = memcpy_category(name_);
        break;
      case Kind::gpu_memset:
        e.category = Category::memset;
        break;
      case Kind::cuda_sync:
        e.category = Category::sync;
        break;
      case Kind::gpu_annotation:
        e.category = Category::marker;
        break;
      case Kind::mtia_device:
        // DMA requests are copies (by direction), everything else a kernel.
        if (name_ == "dma_request") {
          e.category = a.direction == "HOST_TO_DEVICE"   ? Category::memcpy_h2d
                       : a.direction == "DEVICE_TO_HOST" ? Category::memcpy_d2h
                                                         : Category::memcpy_d2d;
        } else {
          e.category = kernel_category(name_);
        }
        break;
      default:
        // gloo collectives: comm.* only in a trace without device work (the
        // importer decides per rank, RawEvent::host_collective).
        e.category = Category::host;
        host_collective(name_, &raw.host_collective);
        break;
    }
    if (a.has_category) e.category = a.category;  // shardscope's own exports
    e.name =
        t_.intern(a.shown_name.empty() ? std::string_view(name_) : std::string_view(a.shown_name));
    if (e.op == kNoString && !is_device_kind(kind)) e.op = t_.intern(cat_);
    e.lane = lane_for(is_device_kind(kind), a);
    RawLane& lane = doc_.lanes[e.lane];
    if (is_compute(e.category)) {
      ++lane.compute;
    } else if (is_comm(e.category)) {
      ++lane.comm;
    } else if (is_copy(e.category)) {
      ++lane.copies;
    } else {
      ++lane.other;
    }
    doc_.events.push_back(e);
    doc_.raw.push_back(raw);
  }

  struct Args {
    Event event;  // bytes, flops, unit, op
    uint64_t correlation = 0;
    int64_t external_id = -1;
    int64_t device = -1;
    int64_t stream = -1;
    bool has_device = false, has_stream = false;
    std::string shown_name;  // shardscope_name
    bool has_category = false;
    Category category = Category::compute;
    bool synthesized = false;     // shardscope_synthesized: made up by the export
    bool synthesized_id = false;  // ... and so was its correlation id (value 1)
    std::string direction;        // MTIA DMA
    std::string name;             // metadata events: args.name
    std::string_view input_dims, input_types, concrete_inputs;
    // [memory]
    int64_t device_id = -1;
    bool has_device_id = false;
    int64_t mem_bytes = 0;
    int64_t total_allocated = 0, total_reserved = 0;
    bool has_allocated = false, has_reserved = false;
    uint64_t addr = 0;
    std::string memory_category;
  };

  void read_args(size_t index, Args* a) {
    s_.begin_object();
    std::string_view key;
    const std::string where = "/traceEvents/" + std::to_string(index) + "/args/";
    auto need_int = [&](const char* k, int64_t* out) {
      if (!read_int_like(s_, out)) fail_at(where + k, "expected an integer");
    };
    auto need_uint = [&](const char* k, uint64_t* out) {
      int64_t v = 0;
      if (!read_int_like(s_, &v) || v < 0) fail_at(where + k, "expected a non-negative integer");
      *out = static_cast<uint64_t>(v);
    };
    auto need_string = [&](const char* k) -> std::string_view {
      if (s_.peek_kind() != JsonKind::string) fail_at(where + k, "expected a string");
      return s_.string();
    };
    for (bool first = true; s_.next_member(first, &key);) {
      if (key == "correlation") {
        need_uint("correlation", &a->correlation);
      } else if (key == "External id") {
        int64_t v = 0;
        a->external_id = read_int_like(s_, &v) && v >= 0 ? v : -1;
      } else if (key == "device") {
        a->has_device = read_int_like(s_, &a->device);
      } else if (key == "stream" || key == "shardscope_stream") {
        // shardscope_stream: our export's stream of markers and syncs, which
        // carry no "stream" so that HTA does not count them busy. The HIP
        // runtime writes "0x0": ignored.
        a->has_stream = read_int_like(s_, &a->stream);
      } else if (key == "bytes") {
        int64_t v = 0;
        if (read_int_like(s_, &v) && v >= 0) a->event.bytes = static_cast<uint64_t>(v);
      } else if (key == "flops") {
        need_uint("flops", &a->event.flops);
      } else if (key == "unit") {
        a->event.unit = t_.intern(need_string("unit"));
      } else if (key == "op") {
        a->event.op = t_.intern(need_string("op"));
      } else if (key == "shardscope_name") {
        a->shown_name = std::string(need_string("shardscope_name"));
      } else if (key == "shardscope_category") {
        const std::string_view c = need_string("shardscope_category");
        a->memory_category = std::string(c);
        if (parse_category(c, &a->category)) a->has_category = true;
      } else if (key == "shardscope_synthesized") {
        int64_t v = 0;
        a->synthesized = true;
        a->synthesized_id = read_int_like(s_, &v) && v == 1;
      } else if (key == "direction" && s_.peek_kind() == JsonKind::string) {
        a->direction = std::string(s_.string());
      } else if (key == "name" && s_.peek_kind() == JsonKind::string) {
        a->name = std::string(s_.string());
      } else if (key == "Input Dims") {
        a->input_dims = raw_value(s_);
      } else if (key == "Input type") {
        a->input_types = raw_value(s_);
      } else if (key == "Concrete Inputs") {
        a->concrete_inputs = raw_value(s_);
      } else if (key == "Device Id") {
        need_int("Device Id", &a->device_id);
        a->has_device_id = true;
      } else if (key == "Bytes") {
        need_int("Bytes", &a->mem_bytes);
      } else if (key == "Total Allocated") {
        need_int("Total Allocated", &a->total_allocated);
        a->has_allocated = true;
      } else if (key == "Total Reserved") {
        need_int("Total Reserved", &a->total_reserved);
        a->has_reserved = true;
      } else if (key == "Addr") {
        int64_t v = 0;
        if (read_int_like(s_, &v) && v >= 0) a->addr = static_cast<uint64_t>(v);
      } else {
        s_.skip();
      }
    }
  }

  void read_memory(size_t index, const Args& a, int64_t time_ns) {
    if (!a.has_device_id || a.device_id < 0) return;  // host memory
    const std::string where = "/traceEvents/" + std::to_string(index) + "/args/";
    if (!a.has_allocated) fail_at(where + "Total Allocated", "missing");
    if (!a.has_reserved) fail_at(where + "Total Reserved", "missing");
    if (a.device_id > INT32_MAX) fail_at(where + "Device Id", "out of range");
    RawMemory m;
    m.record.time_ns = time_ns;
    m.record.bytes = a.mem_bytes;
    m.record.allocated = a.total_allocated;
    m.record.reserved = a.total_reserved;
    m.record.address = a.addr;
    if (!a.memory_category.empty() && !parse_memory_category(a.memory_category, &m.record.category))
      fail_at(where + "shardscope_category",
              "unknown memory category " + quote_input(a.memory_category));
    m.device = static_cast<int32_t>(a.device_id);
    m.pid = pid_;
    doc_.memory.push_back(std::move(m));
  }

  uint32_t lane_for(bool device, const Args& a) {
    key_.assign(device ? "d" : "h");
    key_ += pid_;
    key_ += '/';
    key_ += tid_;
    auto it = lane_index_.find(key_);
    uint32_t id = 0;
    if (it != lane_index_.end()) {
      id = it->second;
    } else {
      id = static_cast<uint32_t>(doc_.lanes.size());
      RawLane l;
      l.pid = pid_;
      l.tid = tid_;
      l.device = device;
      doc_.lanes.push_back(std::move(l));
      lane_index_.emplace(key_, id);
    }
    RawLane& l = doc_.lanes[id];
    if (device) {
      int64_t v = 0;
      if (l.device_id < 0 && a.has_device && a.device >= 0 && a.device <= INT32_MAX)
        l.device_id = static_cast<int32_t>(a.device);
      if (l.device_id < 0 && parse_json_int(pid_, &v) && v >= 0 && v <= INT32_MAX)
        l.device_id = static_cast<int32_t>(v);
      // The stream: args.stream, else the tid (what Kineto uses as the stream).
      if (!l.stream_from_args && a.has_stream && a.stream >= 0 && a.stream <= INT32_MAX) {
        l.stream = static_cast<int32_t>(a.stream);
        l.stream_from_args = true;
      }
      if (l.stream < 0 && parse_json_int(tid_, &v) && v >= 0 && v <= INT32_MAX)
        l.stream = static_cast<int32_t>(v);
    }
    return id;
  }

  JsonScanner s_;
  const std::string& file_;
  Trace& t_;
  Document doc_;
  std::string ph_, cat_, name_, pid_, tid_, key_;
  std::unordered_map<std::string, uint32_t> lane_index_;
};

}  // namespace

bool is_device_kind(Kind k) {
  return k == Kind::kernel || k == Kind::gpu_memcpy || k == Kind::gpu_memset ||
         k == Kind::cuda_sync || k == Kind::gpu_annotation || k == Kind::mtia_device;
}

Document read_document(std::string_view text, const std::string& file, Trace& t) {
  return Reader(text, file, t).read();
}

Document read_document(JsonScanner::Source source, std::string head, const std::string& file,
                       Trace& t) {
  return Reader(std::move(source), std::move(head), file, t).read();
}

}  // namespace shardscope::traces::kineto
