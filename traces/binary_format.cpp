#include "traces/binary_format.h"

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "traces/checksum.h"
#include "traces/error.h"
#include "traces/file_io.h"
#include "traces/json_format.h"
#include "traces/json_stream.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the binary trace format is little-endian; add byte swapping for this target"
#endif

namespace shardscope::traces {

namespace {

// ---- on-disk layout ------------------------------------------------------------------
//
// FileHeader, then section_count sections, each a SectionHeader, its payload
// and zero padding to a multiple of 8 bytes. Section order:
//   META, STRINGS, then per rank RANK LANES EVENTS MEMORY FLOWS STEPS, then END.

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // sizeof(FileHeader)
  uint64_t section_count;
  uint64_t reserved;  // zero
};
static_assert(sizeof(FileHeader) == 32, "FileHeader layout");

struct SectionHeader {
  uint32_t kind;
  uint32_t element_bytes;  // size of one element; 0 for blobs (META, STRINGS, RANK)
  uint64_t count;          // elements (strings for STRINGS, 1 for META and RANK)
  uint64_t payload_bytes;  // without padding
  uint64_t checksum;       // checksum64 of the payload
};
static_assert(sizeof(SectionHeader) == 32, "SectionHeader layout");

enum SectionKind : uint32_t {
  kMeta = 1,
  kStrings = 2,
  kRank = 3,
  kLanes = 4,
  kEvents = 5,
  kMemory = 6,
  kFlows = 7,
  kSteps = 8,
  kEnd = 9
};
constexpr uint64_t kSectionsPerRank = 6;

const char* section_name(uint32_t kind) {
  switch (kind) {
    case kMeta:
      return "metadata";
    case kStrings:
      return "strings";
    case kRank:
      return "rank";
    case kLanes:
      return "lanes";
    case kEvents:
      return "events";
    case kMemory:
      return "memory";
    case kFlows:
      return "flows";
    case kSteps:
      return "steps";
    case kEnd:
      return "end";
  }
  return "unknown";
}

// RANK payload: this header, then represents_count int32 ranks.
struct RankHeader {
  int32_t rank;
  int32_t device;
  int64_t clock_offset_ns;
  uint32_t represents_count;
  uint32_t reserved;  // zero
};
static_assert(sizeof(RankHeader) == 24, "RankHeader layout");

struct LaneRecord {
  uint32_t name;
  uint8_t kind;
  uint8_t reserved[3];  // zero
  int32_t stream;
};
static_assert(sizeof(LaneRecord) == 12, "LaneRecord layout");

// The arrays stored as they are in memory: pin their layouts.
static_assert(std::is_trivially_copyable_v<Event> && sizeof(Event) == 56, "Event layout");
static_assert(offsetof(Event, start_ns) == 0 && offsetof(Event, dur_ns) == 8 &&
                  offsetof(Event, bytes) == 16 && offsetof(Event, flops) == 24 &&
                  offsetof(Event, name) == 32 && offsetof(Event, unit) == 36 &&
                  offsetof(Event, op) == 40 && offsetof(Event, correlation) == 44 &&
                  offsetof(Event, lane) == 48 && offsetof(Event, category) == 52 &&
                  offsetof(Event, reserved) == 53,
              "Event layout");
static_assert(sizeof(Category) == 1 && sizeof(MemoryCategory) == 1, "enum sizes");
static_assert(std::is_trivially_copyable_v<MemoryEvent> && sizeof(MemoryEvent) == 48,
              "MemoryEvent layout");
static_assert(offsetof(MemoryEvent, time_ns) == 0 && offsetof(MemoryEvent, bytes) == 8 &&
                  offsetof(MemoryEvent, allocated) == 16 && offsetof(MemoryEvent, reserved) == 24 &&
                  offsetof(MemoryEvent, address) == 32 && offsetof(MemoryEvent, lane) == 40 &&
                  offsetof(MemoryEvent, category) == 44 &&
                  offsetof(MemoryEvent, reserved_pad) == 45,
              "MemoryEvent layout");
static_assert(std::is_trivially_copyable_v<Flow> && sizeof(Flow) == 8, "Flow layout");
static_assert(std::is_trivially_copyable_v<Step> && sizeof(Step) == 24 &&
                  offsetof(Step, number) == 0 && offsetof(Step, start_ns) == 8 &&
                  offsetof(Step, end_ns) == 16,
              "Step layout");

constexpr uint64_t padding_of(uint64_t n) {
  return (8 - n % 8) % 8;
}

// ---- writer ------------------------------------------------------------------------------

using Sink = std::function<void(const void*, size_t)>;

void write_section(const Sink& sink, uint32_t kind, uint32_t element_bytes, uint64_t count,
                   const void* payload, uint64_t bytes) {
  SectionHeader h{};
  h.kind = kind;
  h.element_bytes = element_bytes;
  h.count = count;
  h.payload_bytes = bytes;
  h.checksum = checksum64(payload, bytes);
  sink(&h, sizeof h);
  if (bytes) sink(payload, bytes);
  static const char zeros[8] = {};
  if (padding_of(bytes)) sink(zeros, padding_of(bytes));
}

template <typename T>
void write_array(const Sink& sink, uint32_t kind, const std::vector<T>& v) {
  write_section(sink, kind, sizeof(T), v.size(), v.data(), v.size() * sizeof(T));
}

// Everything the binary form cannot hold, before a byte is written.
void check_binary_limits(const Trace& t, const std::string& file) {
  for (uint32_t i = 0; i < t.strings.size(); ++i)
    check_binary_limit(file, "strings/" + std::to_string(i), "bytes of one string",
                       t.strings.get(i).size(), kBinaryMaxStringBytes);
  for (size_t k = 0; k < t.ranks.size(); ++k) {
    const RankTrace& r = t.ranks[k];
    const std::string at = "ranks/" + std::to_string(k);
    const std::string of = " of rank " + std::to_string(r.rank);
    check_binary_limit(file, at + "/events", "events" + of, r.events.size(), kBinaryMaxPerRank);
    check_binary_limit(file, at + "/memory", "memory records" + of, r.memory.size(),
                       kBinaryMaxPerRank);
    check_binary_limit(file, at + "/flows", "flows" + of, r.flows.size(), kBinaryMaxPerRank);
    check_binary_limit(file, at + "/steps", "steps" + of, r.steps.size(), kBinaryMaxPerRank);
    check_binary_limit(file, at + "/lanes", "lanes" + of, r.lanes.size(), kBinaryMaxPerRank);
    check_binary_limit(file, at + "/represents", "represented ranks" + of, r.represents.size(),
                       kBinaryMaxPerRank);
  }
}

// `t` has been validated.
void write_binary(const Trace& t, const Sink& sink) {
  FileHeader fh{};
  std::memcpy(fh.magic, kBinaryMagic, 8);
  fh.version = kBinaryVersion;
  fh.header_bytes = sizeof(FileHeader);
  fh.section_count = 3 + kSectionsPerRank * t.ranks.size();
  sink(&fh, sizeof fh);

  std::string meta;
  {
    OutBuffer out(&meta);
    write_metadata_json(t.meta, out);
    out.flush();
  }
  write_section(sink, kMeta, 0, 1, meta.data(), meta.size());

  std::string strings;
  const uint32_t n = t.strings.size();
  strings.resize(4 * static_cast<size_t>(n));
  for (uint32_t i = 0; i < n; ++i) {
    const auto len = static_cast<uint32_t>(t.strings.get(i).size());
    std::memcpy(&strings[4 * static_cast<size_t>(i)], &len, 4);
  }
  for (uint32_t i = 0; i < n; ++i) strings.append(t.strings.get(i));
  write_section(sink, kStrings, 0, n, strings.data(), strings.size());

  for (const RankTrace& r : t.ranks) {
    std::string rank(sizeof(RankHeader) + 4 * r.represents.size(), '\0');
    RankHeader rh{};
    rh.rank = r.rank;
    rh.device = r.device;
    rh.clock_offset_ns = r.clock_offset_ns;
    rh.represents_count = static_cast<uint32_t>(r.represents.size());
    std::memcpy(&rank[0], &rh, sizeof rh);
    if (!r.represents.empty())
      std::memcpy(&rank[sizeof rh], r.represents.data(), 4 * r.represents.size());
    write_section(sink, kRank, 0, 1, rank.data(), rank.size());

    std::vector<LaneRecord> lanes(r.lanes.size());
    for (size_t i = 0; i < r.lanes.size(); ++i) {
      lanes[i] = LaneRecord{};
      lanes[i].name = r.lanes[i].name;
      lanes[i].kind = static_cast<uint8_t>(r.lanes[i].kind);
      lanes[i].stream = r.lanes[i].stream;
    }
    write_array(sink, kLanes, lanes);
    write_array(sink, kEvents, r.events);
    write_array(sink, kMemory, r.memory);
    write_array(sink, kFlows, r.flows);
    write_array(sink, kSteps, r.steps);
  }
  write_section(sink, kEnd, 0, 0, nullptr, 0);
}

// ---- reader ------------------------------------------------------------------------------

// Bounded input: a file or a memory buffer. Every read has been checked
// against size() - pos() by the caller.
class Input {
 public:
  Input(const void* data, size_t size, const std::string& name)
      : name_(name), mem_(static_cast<const unsigned char*>(data)), size_(size) {}
  Input(FILE* file, uint64_t size, const std::string& name)
      : name_(name), file_(file), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  const std::string& name() const { return name_; }

  void read(void* dst, uint64_t n) {
    if (n > left()) fail(ErrorKind::truncated, pos_, "unexpected end of file");
    if (n == 0) return;
    if (mem_) {
      std::memcpy(dst, mem_ + pos_, n);
    } else if (std::fread(dst, 1, n, file_) != n) {
      fail(ErrorKind::truncated, pos_, "file shorter than when opened");
    }
    pos_ += n;
  }

  [[noreturn]] void fail(ErrorKind kind, uint64_t at, const std::string& detail) const {
    throw TraceError(kind, name_, "byte " + std::to_string(at), detail);
  }

 private:
  std::string name_;
  const unsigned char* mem_ = nullptr;
  FILE* file_ = nullptr;
  uint64_t size_ = 0;
  uint64_t pos_ = 0;
};

class BinaryReader {
 public:
  explicit BinaryReader(Input& in) : in_(in) {}

  Trace read() {
    char head[sizeof(FileHeader)] = {};
    const uint64_t n = in_.left() < sizeof head ? in_.left() : sizeof head;
    in_.read(head, n);
    const size_t magic_bytes = n < 8 ? static_cast<size_t>(n) : 8;
    if (std::memcmp(head, kBinaryMagic, magic_bytes) != 0)
      in_.fail(ErrorKind::malformed, 0, "not a shardscope binary trace (bad magic)");
    if (n < sizeof head) in_.fail(ErrorKind::truncated, n, "file ends inside the header");
    FileHeader fh{};
    std::memcpy(&fh, head, sizeof fh);
    if (fh.version < kOldestBinaryVersion || fh.version > kBinaryVersion)
      in_.fail(ErrorKind::unsupported_version, 8,
               "unsupported binary trace version " + std::to_string(fh.version) +
                   " (this build reads versions " + std::to_string(kOldestBinaryVersion) + " to " +
                   std::to_string(kBinaryVersion) + ")");
    if (fh.header_bytes != sizeof(FileHeader))
      in_.fail(ErrorKind::malformed, 12, "header size " + std::to_string(fh.header_bytes));
    if (fh.reserved != 0) in_.fail(ErrorKind::malformed, 24, "reserved header bytes not zero");
    if (fh.section_count < 3 || (fh.section_count - 3) % kSectionsPerRank != 0)
      in_.fail(ErrorKind::malformed, 16,
               "section count " + std::to_string(fh.section_count) + " is not 3 + 6 x ranks");
    if ((fh.section_count - 3) > in_.left() / sizeof(SectionHeader))
      in_.fail(ErrorKind::truncated, 16,
               "section count " + std::to_string(fh.section_count) + " needs more bytes than the " +
                   std::to_string(in_.left()) + " left");
    const uint64_t nranks = (fh.section_count - 3) / kSectionsPerRank;

    read_meta();
    read_strings();
    for (uint64_t i = 0; i < nranks; ++i) read_rank();
    const uint64_t at = in_.pos();
    const SectionHeader end = header(kEnd, 0);
    if (end.count != 0 || end.payload_bytes != 0)
      in_.fail(ErrorKind::malformed, at, "end section is not empty");
    skip_payload(end, at);
    if (in_.left() != 0)
      in_.fail(ErrorKind::malformed, in_.pos(),
               std::to_string(in_.left()) + " trailing bytes after the end section");
    if (fh.version < 2) {
      // Category::host did not exist in version 1.
      for (size_t ri = 0; ri < trace_.ranks.size(); ++ri)
        for (size_t i = 0; i < trace_.ranks[ri].events.size(); ++i)
          if (trace_.ranks[ri].events[i].category == Category::host)
            throw TraceError(
                ErrorKind::schema, in_.name(),
                "/ranks/" + std::to_string(ri) + "/events/" + std::to_string(i) + "/cat",
                "category 11 (host) in a version 1 file, which has no such category");
    }
    validate(trace_, in_.name());
    return std::move(trace_);
  }

 private:
  // Reads a section header at the current offset and checks its framing.
  SectionHeader header(uint32_t kind, uint32_t element_bytes) {
    const uint64_t at = in_.pos();
    const char* what = section_name(kind);
    if (in_.left() < sizeof(SectionHeader))
      in_.fail(ErrorKind::truncated, at,
               std::string("file ends inside the ") + what + " section header");
    SectionHeader h{};
    in_.read(&h, sizeof h);
    if (h.kind != kind)
      in_.fail(ErrorKind::malformed, at,
               std::string("expected the ") + what + " section (kind " + std::to_string(kind) +
                   "), found kind " + std::to_string(h.kind));
    if (h.element_bytes != element_bytes)
      in_.fail(ErrorKind::malformed, at,
               std::string(what) + " section: element size " + std::to_string(h.element_bytes) +
                   ", expected " + std::to_string(element_bytes));
    if (element_bytes &&
        (h.count > h.payload_bytes / element_bytes || h.count * element_bytes != h.payload_bytes))
      in_.fail(ErrorKind::malformed, at,
               std::string(what) + " section: " + std::to_string(h.count) + " elements of " +
                   std::to_string(element_bytes) + " bytes do not make " +
                   std::to_string(h.payload_bytes) + " bytes");
    if (h.payload_bytes > in_.left() || padding_of(h.payload_bytes) > in_.left() - h.payload_bytes)
      in_.fail(ErrorKind::truncated, at,
               std::string(what) + " section needs " + std::to_string(h.payload_bytes) +
                   " bytes, " + std::to_string(in_.left()) + " left");
    return h;
  }

  // Reads the payload into dst, checks the checksum and the padding.
  void payload(const SectionHeader& h, uint64_t at, void* dst) {
    in_.read(dst, h.payload_bytes);
    if (checksum64(dst, h.payload_bytes) != h.checksum)
      in_.fail(ErrorKind::checksum, at,
               std::string("checksum mismatch in the ") + section_name(h.kind) + " section");
    char pad[8] = {};
    const uint64_t n = padding_of(h.payload_bytes);
    in_.read(pad, n);
    for (uint64_t i = 0; i < n; ++i)
      if (pad[i] != 0) in_.fail(ErrorKind::malformed, in_.pos() - n + i, "padding not zero");
  }

  void skip_payload(const SectionHeader& h, uint64_t at) {
    std::string tmp(h.payload_bytes, '\0');
    payload(h, at, tmp.empty() ? nullptr : &tmp[0]);
  }

  std::string blob(const SectionHeader& h, uint64_t at) {
    std::string data(h.payload_bytes, '\0');
    payload(h, at, data.empty() ? nullptr : &data[0]);
    return data;
  }

  template <typename T>
  void array(uint32_t kind, std::vector<T>* out) {
    const uint64_t at = in_.pos();
    const SectionHeader h = header(kind, sizeof(T));
    out->resize(h.count);  // bounded: count * sizeof(T) <= bytes left in the file
    payload(h, at, out->data());
  }

  void read_meta() {
    const uint64_t at = in_.pos();
    const SectionHeader h = header(kMeta, 0);
    if (h.count != 1) in_.fail(ErrorKind::malformed, at, "metadata section count must be 1");
    const std::string text = blob(h, at);
    // Depth-limited streaming parse: the metadata is untrusted input too.
    nlohmann::json meta;
    try {
      meta = parse_json_streaming(text, in_.name(),
                                  [](const JsonParents&, nlohmann::json&) { return true; });
    } catch (const TraceError& e) {
      in_.fail(ErrorKind::malformed, at, "metadata is not valid JSON: " + e.detail());
    }
    if (!meta.is_object()) in_.fail(ErrorKind::malformed, at, "metadata is not a JSON object");
    trace_.meta = read_metadata_json(meta, "/metadata", in_.name());
  }

  void read_strings() {
    const uint64_t at = in_.pos();
    const SectionHeader h = header(kStrings, 0);
    if (h.count == 0 || h.count > h.payload_bytes / 4 || h.count >= StringTable::kNotFound)
      in_.fail(ErrorKind::malformed, at,
               "strings section: count " + std::to_string(h.count) + " does not fit " +
                   std::to_string(h.payload_bytes) + " bytes");
    const std::string data = blob(h, at);
    const uint64_t base = at + sizeof(SectionHeader);
    uint64_t offset = 4 * h.count;
    for (uint64_t i = 0; i < h.count; ++i) {
      uint32_t len = 0;
      std::memcpy(&len, &data[4 * i], 4);
      if (len > data.size() - offset)
        in_.fail(ErrorKind::malformed, base + 4 * i,
                 "string " + std::to_string(i) + " runs past the strings section");
      const std::string_view s(data.data() + offset, len);
      offset += len;
      if (i == 0) {
        if (!s.empty()) in_.fail(ErrorKind::malformed, base, "string 0 must be empty");
        continue;
      }
      if (trace_.strings.intern(s) != i)
        in_.fail(ErrorKind::malformed, base + 4 * i, "string " + std::to_string(i) + " repeated");
    }
    if (offset != data.size())
      in_.fail(ErrorKind::malformed, base + offset, "unused bytes in the strings section");
  }

  void read_rank() {
    const uint64_t at = in_.pos();
    const SectionHeader h = header(kRank, 0);
    if (h.count != 1 || h.payload_bytes < sizeof(RankHeader))
      in_.fail(ErrorKind::malformed, at, "rank section too small");
    const std::string data = blob(h, at);
    RankHeader rh{};
    std::memcpy(&rh, data.data(), sizeof rh);
    if (rh.reserved != 0) in_.fail(ErrorKind::malformed, at, "rank header reserved bytes not zero");
    if (h.payload_bytes != sizeof(RankHeader) + 4ull * rh.represents_count)
      in_.fail(ErrorKind::malformed, at, "rank section size does not match its represents count");
    RankTrace r;
    r.rank = rh.rank;
    r.device = rh.device;
    r.clock_offset_ns = rh.clock_offset_ns;
    r.represents.resize(rh.represents_count);
    if (rh.represents_count)
      std::memcpy(r.represents.data(), data.data() + sizeof rh, 4ull * rh.represents_count);

    std::vector<LaneRecord> lanes;
    const uint64_t lanes_at = in_.pos();
    array(kLanes, &lanes);
    r.lanes.resize(lanes.size());
    for (size_t i = 0; i < lanes.size(); ++i) {
      const LaneRecord& l = lanes[i];
      if (l.kind >= kLaneKindCount || (l.reserved[0] | l.reserved[1] | l.reserved[2]))
        in_.fail(ErrorKind::malformed, lanes_at + sizeof(SectionHeader) + i * sizeof(LaneRecord),
                 "lane " + std::to_string(i) + ": bad kind or reserved bytes");
      r.lanes[i] = Lane{l.name, static_cast<LaneKind>(l.kind), l.stream};
    }
    array(kEvents, &r.events);
    array(kMemory, &r.memory);
    array(kFlows, &r.flows);
    array(kSteps, &r.steps);
    trace_.ranks.push_back(std::move(r));
  }

  Input& in_;
  Trace trace_;
};

}  // namespace

void check_binary_limit(const std::string& file, const std::string& position,
                        const std::string& what, uint64_t count, uint64_t limit) {
  if (count <= limit) return;
  throw TraceError(ErrorKind::schema, file, position,
                   std::to_string(count) + " " + what +
                       ": more than the binary form holds (its limit: " + std::to_string(limit) +
                       ")");
}

void write_trace_binary(const Trace& t, const std::string& path) {
  validate(t, path);
  check_binary_limits(t, path);
  OutputFile file(path);
  write_binary(t, [&file](const void* data, size_t n) { file.write(data, n); });
  file.commit();
}

std::string trace_to_binary(const Trace& t) {
  validate(t);
  check_binary_limits(t, "trace");
  std::string out;
  write_binary(
      t, [&out](const void* data, size_t n) { out.append(static_cast<const char*>(data), n); });
  return out;
}

Trace read_trace_binary(const void* data, size_t size, const std::string& name) {
  Input in(data, size, name);
  return BinaryReader(in).read();
}

Trace read_trace_binary(const std::string& path) {
  const uint64_t size = file_size_of(path);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f)
    throw TraceError(ErrorKind::io, path, "", std::string("cannot open: ") + std::strerror(errno));
  struct Closer {
    FILE* f;
    ~Closer() { std::fclose(f); }
  } closer{f};
  Input in(f, size, path);
  return BinaryReader(in).read();
}

}  // namespace shardscope::traces
