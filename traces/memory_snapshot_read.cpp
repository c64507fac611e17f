// A parsed pickle (traces/pickle_read.h) to a MemorySnapshot: the keys
// torch.cuda.memory._snapshot() gives, checked by type; unknown keys are
// ignored (newer torch versions add some), missing required ones are errors
// naming their path.
#include <limits>

#include "traces/error.h"
#include "traces/input.h"
#include "traces/memory_snapshot.h"

namespace shardscope::traces {

namespace {

using pickle::Document;
using pickle::Kind;

class SnapshotReader {
 public:
  SnapshotReader(const Document& doc, const std::string& file, const SnapshotLimits& limits)
      : doc_(doc), file_(file), limits_(limits) {}

  MemorySnapshot read();

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& detail) const {
    throw TraceError(ErrorKind::schema, file_, path, detail);
  }
  void expect(const Document::Node& n, Kind kind, const std::string& path) const {
    if (n.kind != kind)
      fail(path, std::string("expected a ") + pickle::kind_name(kind) + ", found a " +
                     pickle::kind_name(n.kind));
  }
  // list or tuple (torch writes lists; a tuple is read the same).
  const std::vector<uint32_t>& sequence(const Document::Node& n, const std::string& path) const {
    if (n.kind != Kind::list && n.kind != Kind::tuple)
      fail(path, std::string("expected a list, found a ") + pickle::kind_name(n.kind));
    return n.items;
  }
  const Document::Node* field(const Document::Node& dict, const char* key, const std::string& path,
                              bool required) const {
    const Document::Node* v = doc_.find(dict, key);
    if (!v && required) fail(path, std::string("missing key \"") + key + "\"");
    return v;
  }
  int64_t integer(const Document::Node& dict, const char* key, const std::string& path,
                  bool required, int64_t fallback = 0) const {
    const Document::Node* v = field(dict, key, path, required);
    if (!v || v->kind == Kind::none) {
      if (required) fail(path + "/" + key, "expected an int, found None");
      return fallback;
    }
    if (v->kind != Kind::integer && v->kind != Kind::boolean)
      fail(path + "/" + key, std::string("expected an int, found a ") + pickle::kind_name(v->kind));
    return v->integer;
  }
  uint64_t size(const Document::Node& dict, const char* key, const std::string& path,
                bool required) const {
    const int64_t v = integer(dict, key, path, required);
    if (v < 0) fail(path + "/" + key, "a negative size or address (" + std::to_string(v) + ")");
    return static_cast<uint64_t>(v);
  }
  std::string text(const Document::Node& dict, const char* key, const std::string& path,
                   bool required) const {
    const Document::Node* v = field(dict, key, path, required);
    if (!v) return {};
    if (v->kind != Kind::str)
      fail(path + "/" + key, std::string("expected a str, found a ") + pickle::kind_name(v->kind));
    return v->text;
  }
  void count(const std::string& path) {
    if (++entries_ > limits_.max_entries)
      fail(path, "more than " + std::to_string(limits_.max_entries) +
                     " segments, blocks and trace entries (the limit)");
  }
  std::vector<SnapshotFrame> frames(const Document::Node& dict, const std::string& path);

  const Document& doc_;
  const std::string& file_;
  SnapshotLimits limits_;
  uint64_t entries_ = 0;
};

std::vector<SnapshotFrame> SnapshotReader::frames(const Document::Node& dict,
                                                  const std::string& path) {
  std::vector<SnapshotFrame> out;
  const Document::Node* list = doc_.find(dict, "frames");
  if (!list || list->kind == Kind::none) return out;
  const std::vector<uint32_t>& items = sequence(*list, path + "/frames");
  for (size_t i = 0; i < items.size() && out.size() < limits_.frames_kept; ++i) {
    const std::string p = path + "/frames/" + std::to_string(i);
    const Document::Node& f = doc_.node(items[i]);
    expect(f, Kind::dict, p);
    SnapshotFrame frame;
    frame.filename = text(f, "filename", p, false);
    frame.name = text(f, "name", p, false);
    frame.line = integer(f, "line", p, false);
    out.push_back(std::move(frame));
  }
  return out;
}

MemorySnapshot SnapshotReader::read() {
  MemorySnapshot s;
  const Document::Node& root = doc_.node(doc_.root());
  expect(root, Kind::dict, "/");
  const std::vector<uint32_t>& segments =
      sequence(*field(root, "segments", "/", true), "/segments");
  for (size_t i = 0; i < segments.size(); ++i) {
    const std::string p = "/segments/" + std::to_string(i);
    count(p);
    const Document::Node& n = doc_.node(segments[i]);
    expect(n, Kind::dict, p);
    SnapshotSegment seg;
    seg.device = integer(n, "device", p, true);
    seg.address = size(n, "address", p, true);
    seg.total_size = size(n, "total_size", p, true);
    seg.stream = integer(n, "stream", p, false);
    seg.segment_type = text(n, "segment_type", p, false);
    seg.allocated_size = size(n, "allocated_size", p, false);
    seg.active_size = size(n, "active_size", p, false);
    seg.requested_size = size(n, "requested_size", p, false);
    const Document::Node* expandable = doc_.find(n, "is_expandable");
    seg.is_expandable = expandable && expandable->kind == Kind::boolean && expandable->integer;
    seg.frames = frames(n, p);
    const std::vector<uint32_t>& blocks = sequence(*field(n, "blocks", p, true), p + "/blocks");
    uint64_t at = seg.address;
    for (size_t b = 0; b < blocks.size(); ++b) {
      const std::string bp = p + "/blocks/" + std::to_string(b);
      count(bp);
      const Document::Node& bn = doc_.node(blocks[b]);
      expect(bn, Kind::dict, bp);
      SnapshotBlock block;
      block.size = size(bn, "size", bp, true);
      block.state = text(bn, "state", bp, true);
      block.requested_size =
          doc_.find(bn, "requested_size") ? size(bn, "requested_size", bp, false) : block.size;
      // Blocks tile the segment in address order (MemoryViz places them so).
      block.address = doc_.find(bn, "address") ? size(bn, "address", bp, false) : at;
      if (block.size > std::numeric_limits<uint64_t>::max() - at)
        fail(bp + "/size", "the block ends past the end of the address space");
      at = block.address + block.size;
      block.frames = frames(bn, bp);
      seg.blocks.push_back(std::move(block));
    }
    s.segments.push_back(std::move(seg));
  }
  const std::vector<uint32_t>& traces =
      sequence(*field(root, "device_traces", "/", true), "/device_traces");
  for (size_t d = 0; d < traces.size(); ++d) {
    const std::string dp = "/device_traces/" + std::to_string(d);
    const std::vector<uint32_t>& entries = sequence(doc_.node(traces[d]), dp);
    std::vector<SnapshotEvent> out;
    out.reserve(entries.size() < limits_.max_entries ? entries.size() : 0);
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string p = dp + "/" + std::to_string(i);
      count(p);
      const Document::Node& n = doc_.node(entries[i]);
      expect(n, Kind::dict, p);
      SnapshotEvent e;
      e.action = text(n, "action", p, true);
      e.addr = size(n, "addr", p, false);
      e.size = size(n, "size", p, false);
      e.stream = integer(n, "stream", p, false);
      const Document::Node* t = doc_.find(n, "time_us");
      e.has_time = t && t->kind != Kind::none;
      if (e.has_time) e.time_us = integer(n, "time_us", p, false);
      e.device_free = size(n, "device_free", p, false);
      e.frames = frames(n, p);
      out.push_back(std::move(e));
    }
    s.device_traces.push_back(std::move(out));
  }
  return s;
}

}  // namespace

MemorySnapshot memory_snapshot_from_pickle(const pickle::Document& doc, const std::string& file,
                                           const SnapshotLimits& limits) {
  SnapshotReader r(doc, file, limits);
  return r.read();
}

MemorySnapshot load_memory_snapshot(const std::string& path, const SnapshotLimits& limits) {
  InputFile in(path, InputLimits());
  std::string bytes;
  // Read at most one byte past the limit, so a huge file costs the limit.
  while (bytes.size() <= limits.pickle.max_file_bytes) {
    const uint64_t left = limits.pickle.max_file_bytes + 1 - bytes.size();
    if (in.read(bytes, static_cast<size_t>(left < kInputChunk ? left : kInputChunk)) == 0) break;
  }
  if (bytes.size() > limits.pickle.max_file_bytes)
    throw TraceError(ErrorKind::malformed, path, "",
                     "more than " + std::to_string(limits.pickle.max_file_bytes) +
                         " bytes of pickle (the limit)");
  const pickle::Document doc = pickle::read_pickle(bytes, path, limits.pickle);
  return memory_snapshot_from_pickle(doc, path, limits);
}

}  // namespace shardscope::traces
