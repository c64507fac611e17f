#include "traces/json_format.h"

#include <cctype>
#include <cstdlib>

#include "traces/error.h"
#include "traces/file_io.h"
#include "traces/json_stream.h"

namespace shardscope::traces {

using nlohmann::json;

// ---- writer ----------------------------------------------------------------------

namespace {

void put_key(OutBuffer& out, const char* key) {
  out.put('"');
  out.put(key);
  out.put("\":");
}

}  // namespace

void write_metadata_json(const Metadata& m, OutBuffer& out) {
  out.put('{');
  put_key(out, "source");
  out.put_string(source_name(m.source));
  out.put(',');
  put_key(out, "model");
  out.put_string(m.model);
  out.put(',');
  put_key(out, "policy");
  if (m.policy_json.empty()) {
    out.put("null");
  } else {
    json policy;
    try {
      policy = json::parse(m.policy_json);
    } catch (const json::exception& e) {
      throw TraceError(ErrorKind::schema, "trace", "/metadata/policy",
                       "policy is not valid JSON: " + clip_input(e.what()));
    }
    out.put(policy.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  out.put(',');
  put_key(out, "hardware");
  out.put_string(m.hardware);
  out.put(',');
  put_key(out, "world_size");
  out.put_int(m.world_size);
  out.put(',');
  put_key(out, "tool_versions");
  out.put('{');
  bool first = true;
  for (const auto& [tool, version] : m.tool_versions) {
    if (!first) out.put(',');
    first = false;
    out.put_string(tool);
    out.put(':');
    out.put_string(version);
  }
  out.put("},");
  put_key(out, "clock_alignment");
  out.put_string(m.clock_alignment);
  out.put('}');
}

void write_event_fields_json(const Trace& t, const Event& e, OutBuffer& out, bool blank_controls) {
  if (e.unit != kNoString) {
    out.put(",\"unit\":");
    out.put_string(t.str(e.unit), blank_controls);
  }
  if (e.op != kNoString) {
    out.put(",\"op\":");
    out.put_string(t.str(e.op), blank_controls);
  }
  if (e.bytes) {
    out.put(",\"bytes\":");
    out.put_uint(e.bytes);
  }
  if (e.flops) {
    out.put(",\"flops\":");
    out.put_uint(e.flops);
  }
}

namespace {

void write_event(const Trace& t, const Event& e, OutBuffer& out) {
  out.put("{\"lane\":");
  out.put_uint(e.lane);
  out.put(",\"name\":");
  out.put_string(t.str(e.name));
  out.put(",\"cat\":\"");
  out.put(category_name(e.category));
  out.put("\",\"start_ns\":");
  out.put_int(e.start_ns);
  out.put(",\"dur_ns\":");
  out.put_int(e.dur_ns);
  write_event_fields_json(t, e, out, false);
  if (e.correlation) {
    out.put(",\"correlation\":");
    out.put_uint(e.correlation);
  }
  out.put('}');
}

void write_memory(const MemoryEvent& m, OutBuffer& out) {
  out.put("{\"t_ns\":");
  out.put_int(m.time_ns);
  out.put(",\"bytes\":");
  out.put_int(m.bytes);
  out.put(",\"allocated\":");
  out.put_int(m.allocated);
  out.put(",\"reserved\":");
  out.put_int(m.reserved);
  if (m.address) {
    out.put(",\"address\":");
    out.put_uint(m.address);
  }
  if (m.lane != kNoLane) {
    out.put(",\"lane\":");
    out.put_uint(m.lane);
  }
  out.put(",\"cat\":\"");
  out.put(memory_category_name(m.category));
  out.put("\"}");
}

void write_rank(const Trace& t, const RankTrace& r, OutBuffer& out) {
  out.put("{\"rank\":");
  out.put_int(r.rank);
  out.put(",\"device\":");
  out.put_int(r.device);
  out.put(",\"clock_offset_ns\":");
  out.put_int(r.clock_offset_ns);
  out.put(",\"represents\":[");
  for (size_t i = 0; i < r.represents.size(); ++i) {
    if (i) out.put(',');
    out.put_int(r.represents[i]);
  }
  out.put("],\n\"lanes\":[");
  for (size_t i = 0; i < r.lanes.size(); ++i) {
    const Lane& l = r.lanes[i];
    out.put(i ? ",\n" : "\n");
    out.put("{\"name\":");
    out.put_string(t.str(l.name));
    out.put(",\"kind\":\"");
    out.put(lane_kind_name(l.kind));
    out.put("\",\"stream\":");
    out.put_int(l.stream);
    out.put('}');
  }
  out.put("],\n\"steps\":[");
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const Step& s = r.steps[i];
    out.put(i ? ",\n" : "\n");
    out.put("{\"step\":");
    out.put_int(s.number);
    out.put(",\"start_ns\":");
    out.put_int(s.start_ns);
    out.put(",\"end_ns\":");
    out.put_int(s.end_ns);
    out.put('}');
  }
  out.put("],\n\"events\":[");
  for (size_t i = 0; i < r.events.size(); ++i) {
    out.put(i ? ",\n" : "\n");
    write_event(t, r.events[i], out);
  }
  out.put("],\n\"memory\":[");
  for (size_t i = 0; i < r.memory.size(); ++i) {
    out.put(i ? ",\n" : "\n");
    write_memory(r.memory[i], out);
  }
  out.put("],\n\"flows\":[");
  for (size_t i = 0; i < r.flows.size(); ++i) {
    out.put(i ? ",\n" : "\n");
    out.put("{\"from\":");
    out.put_uint(r.flows[i].from);
    out.put(",\"to\":");
    out.put_uint(r.flows[i].to);
    out.put('}');
  }
  out.put("]}");
}

}  // namespace

void write_trace_json(const Trace& t, OutBuffer& out) {
  validate(t);
  out.put("{\"format\":\"");
  out.put(kJsonFormatName);
  out.put("\",\"version\":");
  out.put_int(kJsonFormatVersion);
  out.put(",\n\"metadata\":");
  write_metadata_json(t.meta, out);
  out.put(",\n\"ranks\":[");
  for (size_t i = 0; i < t.ranks.size(); ++i) {
    out.put(i ? ",\n" : "\n");
    write_rank(t, t.ranks[i], out);
  }
  out.put("]}\n");
  out.flush();
}

std::string trace_to_json(const Trace& t) {
  std::string s;
  OutBuffer out(&s);
  write_trace_json(t, out);
  return s;
}

// ---- reader ----------------------------------------------------------------------

namespace {

// A quick look at the first bytes for `"version": N`, so that a file of a
// future version gets the version error rather than a schema error from
// fields it changed. The full check runs at the end.
void precheck_version(std::string_view text, const std::string& file) {
  const std::string_view head = text.substr(0, 4096);
  const size_t k = head.find("\"version\"");
  if (k == std::string_view::npos) return;
  size_t i = k + 9;
  while (i < head.size() && std::isspace(static_cast<unsigned char>(head[i]))) ++i;
  if (i >= head.size() || head[i] != ':') return;
  ++i;
  while (i < head.size() && std::isspace(static_cast<unsigned char>(head[i]))) ++i;
  size_t j = i;
  while (j < head.size() && j - i < 9 && std::isdigit(static_cast<unsigned char>(head[j]))) ++j;
  if (j == i || (j < head.size() && std::isdigit(static_cast<unsigned char>(head[j])))) return;
  const long v = std::strtol(std::string(head.substr(i, j - i)).c_str(), nullptr, 10);
  if (v != kJsonFormatVersion)
    throw TraceError(ErrorKind::unsupported_version, file, "/version",
                     "unsupported trace version " + std::to_string(v) +
                         " (this build reads version " + std::to_string(kJsonFormatVersion) + ")");
}

class NativeReader {
 public:
  explicit NativeReader(const std::string& file) : file_(file) {}

  Trace read(std::string_view text) {
    precheck_version(text, file_);
    json root = parse_json_streaming(
        text, file_, [this](const JsonParents& p, json& v) { return on_container(p, v); });
    if (!root.is_object())
      throw TraceError(ErrorKind::schema, file_, "/", "the top level must be an object");
    JsonFields top(root, "/", file_);
    const std::string format = top.get_string("format", true);
    if (format != kJsonFormatName)
      top.fail("format",
               "expected \"" + std::string(kJsonFormatName) + "\", got " + quote_input(format));
    const int64_t version = top.get_int("version", true);
    if (version != kJsonFormatVersion)
      throw TraceError(ErrorKind::unsupported_version, file_, "/version",
                       "unsupported trace version " + std::to_string(version) +
                           " (this build reads version " + std::to_string(kJsonFormatVersion) +
                           ")");
    trace_.meta = read_metadata_json(*top.get_object("metadata", true), "/metadata", file_);
    const json* ranks = top.get_array("ranks", true);
    if (!ranks->empty()) top.fail("ranks", "elements must be objects");
    validate(trace_, file_);
    return std::move(trace_);
  }

 private:
  // Elements of /ranks/N/{events,memory,flows} and whole ranks are consumed
  // here and dropped from the document.
  bool on_container(const JsonParents& p, json& v) {
    if (p.size() == 4 && !p[0].is_array && p[0].key == "ranks" && p[1].is_array && !p[2].is_array &&
        p[3].is_array && v.is_object()) {
      const std::string& array = p[2].key;
      if (array == "events") {
        read_event(v, json_path(p));
        return false;
      }
      if (array == "memory") {
        read_memory(v, json_path(p));
        return false;
      }
      if (array == "flows") {
        read_flow(v, json_path(p));
        return false;
      }
      return true;
    }
    if (p.size() == 2 && !p[0].is_array && p[0].key == "ranks" && p[1].is_array) {
      if (!v.is_object())
        throw TraceError(ErrorKind::schema, file_, json_path(p), "a rank must be an object");
      read_rank(v, json_path(p));
      return false;
    }
    return true;
  }

  void read_event(const json& v, const std::string& where) {
    JsonFields f(v, where, file_);
    Event e;
    e.lane = static_cast<uint32_t>(f.get_uint("lane", true, 0, kNoLane - 1));
    e.name = trace_.intern(f.get_string("name", true));
    const std::string cat = f.get_string("cat", true);
    if (!parse_category(cat, &e.category)) f.fail("cat", "unknown category " + quote_input(cat));
    e.start_ns = f.get_int("start_ns", true);
    e.dur_ns = f.get_int("dur_ns", true, 0, 0);
    e.unit = trace_.intern(f.get_string("unit", false));
    e.op = trace_.intern(f.get_string("op", false));
    e.bytes = f.get_uint("bytes", false);
    e.flops = f.get_uint("flops", false);
    e.correlation = static_cast<uint32_t>(f.get_uint("correlation", false, 0, UINT32_MAX));
    pending_.events.push_back(e);
  }

  void read_memory(const json& v, const std::string& where) {
    JsonFields f(v, where, file_);
    MemoryEvent m;
    m.time_ns = f.get_int("t_ns", true);
    m.bytes = f.get_int("bytes", true);
    m.allocated = f.get_int("allocated", true);
    m.reserved = f.get_int("reserved", true);
    m.address = f.get_uint("address", false);
    m.lane = static_cast<uint32_t>(f.get_uint("lane", false, kNoLane, kNoLane));
    const std::string cat = f.get_string("cat", false, "unknown");
    if (!parse_memory_category(cat, &m.category))
      f.fail("cat", "unknown memory category " + quote_input(cat));
    pending_.memory.push_back(m);
  }

  void read_flow(const json& v, const std::string& where) {
    JsonFields f(v, where, file_);
    Flow fl;
    fl.from = static_cast<uint32_t>(f.get_uint("from", true, 0, UINT32_MAX));
    fl.to = static_cast<uint32_t>(f.get_uint("to", true, 0, UINT32_MAX));
    pending_.flows.push_back(fl);
  }

  void read_rank(const json& v, const std::string& where) {
    JsonFields f(v, where, file_);
    RankTrace r = std::move(pending_);
    pending_ = RankTrace();
    r.rank = static_cast<int32_t>(f.get_int("rank", true, 0, 0, INT32_MAX));
    r.device = static_cast<int32_t>(f.get_int("device", false, -1, -1, INT32_MAX));
    r.clock_offset_ns = f.get_int("clock_offset_ns", false);
    if (const json* reps = f.get_array("represents", false)) {
      for (size_t i = 0; i < reps->size(); ++i) {
        const json& x = (*reps)[i];
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
          f.fail("represents", "element " + std::to_string(i) + " is not a rank");
        r.represents.push_back(static_cast<int32_t>(x.get<int64_t>()));
      }
    }
    const json* lanes = f.get_array("lanes", true);
    for (size_t i = 0; i < lanes->size(); ++i) {
      JsonFields lf((*lanes)[i], where + "/lanes/" + std::to_string(i), file_);
      Lane l;
      l.name = trace_.intern(lf.get_string("name", true));
      const std::string kind = lf.get_string("kind", true);
      if (!parse_lane_kind(kind, &l.kind))
        lf.fail("kind", "unknown lane kind " + quote_input(kind));
      l.stream = static_cast<int32_t>(lf.get_int("stream", false, -1, INT32_MIN, INT32_MAX));
      r.lanes.push_back(l);
    }
    if (const json* steps = f.get_array("steps", false)) {
      for (size_t i = 0; i < steps->size(); ++i) {
        JsonFields sf((*steps)[i], where + "/steps/" + std::to_string(i), file_);
        Step s;
        s.number = sf.get_int("step", true);
        s.start_ns = sf.get_int("start_ns", true);
        s.end_ns = sf.get_int("end_ns", true);
        r.steps.push_back(s);
      }
    }
    for (const char* array : {"events", "memory", "flows"}) {
      const json* a = f.get_array(array, false);
      if (a && !a->empty()) f.fail(array, "elements must be objects");
    }
    if (trace_.find_rank(r.rank))
      f.fail("rank", "rank " + std::to_string(r.rank) + " appears twice");
    trace_.ranks.push_back(std::move(r));
  }

  const std::string& file_;
  Trace trace_;
  RankTrace pending_;
};

}  // namespace

Metadata read_metadata_json(const json& obj, const std::string& where, const std::string& file) {
  JsonFields f(obj, where, file);
  Metadata m;
  const std::string source = f.get_string("source", true);
  if (!parse_source(source, &m.source)) f.fail("source", "unknown source " + quote_input(source));
  m.model = f.get_string("model", false);
  m.hardware = f.get_string("hardware", false);
  m.clock_alignment = f.get_string("clock_alignment", false);
  m.world_size = static_cast<int32_t>(f.get_int("world_size", false, 0, 0, INT32_MAX));
  if (f.has("policy")) {
    const json& policy = obj.at("policy");
    if (!policy.is_null()) {
      if (!policy.is_object()) f.fail("policy", "expected an object or null");
      m.policy_json = policy.dump(-1, ' ', false, json::error_handler_t::replace);
    }
  }
  if (const json* tools = f.get_object("tool_versions", false)) {
    for (auto it = tools->begin(); it != tools->end(); ++it) {
      if (!it.value().is_string())
        f.fail("tool_versions", quote_input(it.key()) + " is not a string");
      m.tool_versions[it.key()] = it.value().get<std::string>();
    }
  }
  return m;
}

Trace read_trace_json(std::string_view text, const std::string& file) {
  return NativeReader(file).read(text);
}

}  // namespace shardscope::traces
