// Native formats: lossless round trips, typed errors on damaged input.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "io/output_error.h"
#include "tests/temp_dir.h"
#include "tests/traces/sample_traces.h"
#include "traces/binary_format.h"
#include "traces/checksum.h"
#include "traces/error.h"
#include "traces/file_io.h"
#include "traces/json_format.h"
#include "traces/trace_io.h"

using namespace shardscope::traces;
namespace fs = std::filesystem;

namespace {

// A trace exercising edge values: extreme times, unicode, empty strings,
// empty ranks, no-lane memory records.
Trace edge_trace() {
  Trace t;
  t.meta.source = Source::kineto;
  t.meta.model = "m\xc3\xa9 \"x\"";
  t.meta.world_size = 3;
  RankTrace& r = t.add_rank(2);
  r.represents = {2, 5};
  r.clock_offset_ns = -123456789;
  const uint32_t lane = t.add_lane(r, "stream 7 \xe2\x86\x92 \xf0\x9f\x9a\x80", LaneKind::other, 7);
  Event& e = add_event(r, lane, t.intern(""), Category::marker,
                       std::numeric_limits<int64_t>::min() + 1, 0);
  e.correlation = std::numeric_limits<uint32_t>::max();
  Event& big = add_event(r, lane, t.intern("big"), Category::memcpy_d2d,
                         std::numeric_limits<int64_t>::max() - 10, 10);
  big.bytes = std::numeric_limits<uint64_t>::max();
  big.flops = 1;
  MemoryEvent m;
  m.time_ns = -5;
  m.bytes = std::numeric_limits<int64_t>::min();
  m.allocated = std::numeric_limits<int64_t>::max();
  m.address = std::numeric_limits<uint64_t>::max();
  r.memory.push_back(m);
  r.steps.push_back(Step{std::numeric_limits<int64_t>::max(), -10, -10});
  t.add_rank(0);  // empty rank
  t.intern("unused string");
  return t;
}

template <typename F>
ErrorKind error_kind_of(F&& f) {
  try {
    f();
  } catch (const TraceError& e) {
    return e.kind();
  }
  FAIL("no TraceError thrown");
  return ErrorKind::io;
}

}  // namespace

TEST_CASE("JSON round trip is lossless: model -> JSON -> model -> identical JSON", "[formats]") {
  for (const Trace& t :
       {testing::sample_trace(), edge_trace(), testing::random_trace(3, 2, 3, 300)}) {
    const std::string text = trace_to_json(t);
    const Trace back = read_trace_json(text);
    CHECK(back == t);
    CHECK(trace_to_json(back) == text);
  }
}

TEST_CASE("binary round trip is lossless, byte for byte", "[formats]") {
  for (const Trace& t :
       {testing::sample_trace(), edge_trace(), testing::random_trace(4, 3, 0, 500)}) {
    const std::string bytes = trace_to_binary(t);
    CHECK(std::memcmp(bytes.data(), kBinaryMagic, 8) == 0);
    CHECK(bytes.size() % 8 == 0);
    const Trace back = read_trace_binary(bytes.data(), bytes.size());
    CHECK(back == t);
    CHECK(trace_to_binary(back) == bytes);
    // The binary form keeps the string table as is, unused strings included.
    CHECK(back.strings.size() == t.strings.size());
  }
}

TEST_CASE("JSON -> binary -> JSON and binary -> JSON -> binary agree", "[formats]") {
  const Trace t = testing::sample_trace();
  const std::string json = trace_to_json(t);
  const std::string bin = trace_to_binary(read_trace_json(json));
  CHECK(trace_to_json(read_trace_binary(bin.data(), bin.size())) == json);
  CHECK(read_trace_json(trace_to_json(read_trace_binary(bin.data(), bin.size()))) == t);
}

TEST_CASE("save_trace picks the form by extension, load_trace by content", "[formats]") {
  const shardscope::test::TempDir tmp("shardscope_formats");
  const std::string dir = tmp.path.string();
  const Trace t = testing::sample_trace();
  const std::string json_path = dir + "/t.json";
  const std::string bin_path = dir + "/t.sstrace";
  save_trace(t, json_path);
  save_trace(t, bin_path);
  CHECK(detect_format(read_file(json_path)) == TraceFormat::json);
  CHECK(detect_format(read_file(bin_path)) == TraceFormat::binary);
  CHECK(load_trace(json_path) == t);
  CHECK(load_trace(bin_path) == t);
  // Content, not the name, decides: a binary trace named .json still loads.
  const std::string renamed = dir + "/binary.json";
  fs::copy_file(bin_path, renamed, fs::copy_options::overwrite_existing);
  CHECK(load_trace(renamed) == t);
}

TEST_CASE("an unknown version is a typed error in both forms", "[formats]") {
  std::string json = trace_to_json(testing::sample_trace());
  const size_t at = json.find("\"version\":1");
  REQUIRE(at != std::string::npos);
  json.replace(at, 11, "\"version\":9");
  CHECK(error_kind_of([&] { read_trace_json(json); }) == ErrorKind::unsupported_version);

  std::string bin = trace_to_binary(testing::sample_trace());
  const uint32_t v = kBinaryVersion + 1;
  std::memcpy(&bin[8], &v, 4);
  try {
    read_trace_binary(bin.data(), bin.size(), "x.bin");
    FAIL("accepted a version from the future");
  } catch (const TraceError& e) {
    CHECK(e.kind() == ErrorKind::unsupported_version);
    CHECK(std::string(e.what()).find("version " + std::to_string(v)) != std::string::npos);
    CHECK(e.position() == "byte 8");
  }
}

TEST_CASE("binary version 1 files still read, a host event cannot be in one", "[formats]") {
  REQUIRE(kBinaryVersion == 2);
  const uint32_t v1 = 1;
  std::string bin = trace_to_binary(testing::sample_trace());
  std::memcpy(&bin[8], &v1, 4);
  CHECK(read_trace_binary(bin.data(), bin.size(), "v1.bin") == testing::sample_trace());

  Trace t = testing::sample_trace();
  RankTrace& r = t.ranks[1];
  testing::ev(t, r, 0, "aten::mm", Category::host, 1'000'000'010, 5);
  sort_events(r);
  std::string with_host = trace_to_binary(t);
  CHECK(read_trace_binary(with_host.data(), with_host.size(), "v2.bin") == t);
  std::memcpy(&with_host[8], &v1, 4);
  try {
    read_trace_binary(with_host.data(), with_host.size(), "v1.bin");
    FAIL("accepted category host in a version 1 file");
  } catch (const TraceError& e) {
    CHECK(e.kind() == ErrorKind::schema);
    CHECK(e.position().rfind("/ranks/1/events/", 0) == 0);
    CHECK(std::string(e.what()).find("version 1") != std::string::npos);
  }
}

TEST_CASE("a binary trace truncated at every offset gives a typed error", "[formats]") {
  const std::string bin = trace_to_binary(testing::sample_trace());
  for (size_t n = 0; n < bin.size(); ++n) {
    INFO("truncated to " << n << " of " << bin.size() << " bytes");
    const ErrorKind k = error_kind_of([&] { read_trace_binary(bin.data(), n); });
    CHECK((k == ErrorKind::truncated || k == ErrorKind::malformed));
  }
}

TEST_CASE("every single-byte corruption of a binary trace is detected", "[formats]") {
  const std::string bin = trace_to_binary(testing::sample_trace());
  for (size_t i = 0; i < bin.size(); ++i) {
    for (unsigned char flip : {0x01, 0x80, 0xff}) {
      std::string bad = bin;
      bad[i] = static_cast<char>(bad[i] ^ flip);
      INFO("byte " << i << " xor " << int(flip));
      CHECK_THROWS_AS(read_trace_binary(bad.data(), bad.size()), TraceError);
    }
  }
}

TEST_CASE("binary counts are checked against the bytes left before allocating", "[formats]") {
  std::string bin = trace_to_binary(testing::sample_trace());
  // The events section of rank 0: find it by walking the section headers.
  size_t at = 32;
  for (;;) {
    REQUIRE(at + 32 <= bin.size());
    uint32_t kind;
    uint64_t bytes;
    std::memcpy(&kind, &bin[at], 4);
    std::memcpy(&bytes, &bin[at + 16], 8);
    if (kind == 5) break;  // events
    at += 32 + bytes + (8 - bytes % 8) % 8;
  }
  const uint64_t huge = uint64_t(1) << 58;
  std::memcpy(&bin[at + 8], &huge, 8);               // count
  const uint64_t huge_bytes = huge * sizeof(Event);  // consistent with the count
  std::memcpy(&bin[at + 16], &huge_bytes, 8);
  try {
    read_trace_binary(bin.data(), bin.size(), "huge.bin");
    FAIL("accepted a huge count");
  } catch (const TraceError& e) {
    CHECK(e.kind() == ErrorKind::truncated);
    CHECK(e.position() == "byte " + std::to_string(at));
  }
  // An inconsistent count/bytes pair is malformed.
  std::memcpy(&bin[at + 16], &huge, 8);
  CHECK(error_kind_of([&] { read_trace_binary(bin.data(), bin.size()); }) == ErrorKind::malformed);
}

TEST_CASE("not a trace: bad magic, empty file, trailing bytes", "[formats]") {
  CHECK(error_kind_of([] { read_trace_binary("PK\3\4xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 36); }) ==
        ErrorKind::malformed);
  CHECK(error_kind_of([] { read_trace_binary("", 0); }) == ErrorKind::truncated);
  std::string bin = trace_to_binary(testing::sample_trace());
  bin += std::string(8, '\0');
  CHECK(error_kind_of([&] { read_trace_binary(bin.data(), bin.size()); }) == ErrorKind::malformed);
}

TEST_CASE("load_trace says what a file is not: empty, garbage, a damaged magic", "[formats]") {
  // These used to read "invalid JSON" from the JSON parser.
  const shardscope::test::TempDir dir("shardscope_formats");
  const auto load_error = [&](const std::string& bytes) -> std::string {
    const std::string path = (dir.path / "t.trace").string();
    std::ofstream(path, std::ios::binary) << bytes;
    try {
      load_trace(path);
    } catch (const TraceError& e) {
      CHECK(e.kind() == ErrorKind::malformed);
      return e.what();
    }
    return "no error";
  };
  CHECK_THAT(load_error(""), Catch::Contains("empty file: not a shardscope or Kineto trace"));
  CHECK_THAT(load_error(" \n\t "), Catch::Contains("only whitespace"));
  CHECK_THAT(load_error("PK\3\4 zip"),
             Catch::Contains("not a shardscope or Kineto trace: it starts with bytes 50 4b 03 04"));
  std::string damaged(kBinaryMagic, 8);
  damaged[5] = 'X';
  damaged += std::string(64, '\0');
  CHECK_THAT(load_error(damaged),
             Catch::Contains("byte 6: a damaged binary trace magic: the first 5 bytes match it"));
  // A file that ends inside the magic is a truncated binary trace, as before.
  const std::string bin = trace_to_binary(testing::sample_trace());
  const std::string path = (dir.path / "short.trace").string();
  std::ofstream(path, std::ios::binary) << bin.substr(0, 5);
  CHECK(error_kind_of([&] { load_trace(path); }) == ErrorKind::truncated);
  // JSON still goes to the JSON readers (and their messages).
  CHECK_THAT(load_error("{\"format\": 3"), !Catch::Contains("not a shardscope or Kineto trace"));
}

TEST_CASE("JSON errors name the position: byte offset or JSON path", "[formats]") {
  try {
    read_trace_json("{\"format\": \"shardscope.trace\", \"version\": 1,, }", "bad.json");
    FAIL("accepted invalid JSON");
  } catch (const TraceError& e) {
    CHECK(e.kind() == ErrorKind::malformed);
    CHECK(e.position() == "byte 45");
    CHECK(std::string(e.what()).rfind("bad.json: byte 45: ", 0) == 0);
  }
  std::string json = trace_to_json(testing::sample_trace());
  const size_t at = json.find("\"dur_ns\":", json.find("\"events\""));
  json.insert(at + 9, "-");  // negative duration on /ranks/0/events/0
  try {
    read_trace_json(json, "neg.json");
    FAIL("accepted a negative duration");
  } catch (const TraceError& e) {
    CHECK(e.kind() == ErrorKind::schema);
    CHECK(e.position() == "/ranks/0/events/0/dur_ns");
  }
  // References are checked too: a lane that does not exist.
  json = trace_to_json(testing::sample_trace());
  const size_t lane = json.find("{\"lane\":", json.find("\"events\""));
  json.replace(lane, 9, "{\"lane\":9");
  try {
    read_trace_json(json, "lane.json");
    FAIL("accepted a missing lane");
  } catch (const TraceError& e) {
    CHECK(e.kind() == ErrorKind::schema);
    CHECK(e.position() == "/ranks/0/events/0/lane");
  }
  CHECK(error_kind_of([] { read_trace_json("[1, 2]"); }) == ErrorKind::schema);
  CHECK(error_kind_of([] {
          read_trace_json(R"({"format":"shardscope.trace","version":1,"metadata":{}})");
        }) == ErrorKind::schema);
  CHECK(error_kind_of([] { read_trace_json(std::string(100, '[') + std::string(100, ']')); }) ==
        ErrorKind::malformed);  // nesting limit
}

TEST_CASE("an error never leaves a partial output file", "[formats]") {
  const shardscope::test::TempDir tmp("shardscope_formats");
  const std::string dir = tmp.path.string();
  Trace bad = testing::sample_trace();
  bad.ranks[0].events[3].lane = 99;
  for (const char* name : {"/bad.json", "/bad.sstrace"}) {
    const std::string path = dir + name;
    CHECK_THROWS_AS(save_trace(bad, path), TraceError);
    CHECK_FALSE(fs::exists(path));
  }
  // An unwritable destination: the error names it, and nothing is left.
  const std::string nowhere = dir + "/no/such/dir/t.json";
  CHECK_THROWS_AS(save_trace(testing::sample_trace(), nowhere), shardscope::io::OutputTargetError);
  CHECK_THROWS_WITH(save_trace(testing::sample_trace(), nowhere), Catch::Contains(nowhere));
  // An existing file is replaced only when the new one is complete.
  const std::string path = dir + "/keep.json";
  save_trace(testing::sample_trace(), path);
  const std::string before = read_file(path);
  CHECK_THROWS_AS(save_trace(bad, path), TraceError);
  CHECK(read_file(path) == before);
  // No temporary files left behind: keep.json is the only file.
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);
}

TEST_CASE("validate names the first inconsistency", "[formats]") {
  Trace t = testing::sample_trace();
  CHECK_NOTHROW(validate(t));
  t.ranks[1].flows.push_back(Flow{0, 100000});
  try {
    validate(t, "mine");
    FAIL("accepted a dangling flow");
  } catch (const TraceError& e) {
    CHECK(e.position() == "/ranks/1/flows/" + std::to_string(t.ranks[1].flows.size() - 1) + "/to");
  }
  t = testing::sample_trace();
  std::swap(t.ranks[0].steps[0], t.ranks[0].steps[1]);
  CHECK_THROWS_AS(validate(t), TraceError);
  t = testing::sample_trace();
  t.ranks[0].events[0].reserved[1] = 1;
  CHECK_THROWS_AS(validate(t), TraceError);
}

TEST_CASE("string table interns once and keeps ids stable across copies", "[trace]") {
  StringTable s;
  CHECK(s.get(0).empty());
  const uint32_t a = s.intern("alpha");
  CHECK(s.intern("alpha") == a);
  StringTable copy = s;
  CHECK(copy.find("alpha") == a);
  CHECK(copy.intern("beta") == 2);
  CHECK(s.find("beta") == StringTable::kNotFound);
  // Many strings: views into the table stay valid (no reallocation moves).
  for (int i = 0; i < 10000; ++i) s.intern("s" + std::to_string(i));
  CHECK(s.find("s9999") == 10001);
  CHECK(s.get(a) == "alpha");
  CHECK(sizeof(Event) == 56);
  CHECK(sizeof(MemoryEvent) == 48);
}

namespace {

// A binary trace with no ranks and the given metadata text (built by hand:
// file header, META, STRINGS with only "", END).
std::string binary_with_metadata(const std::string& meta) {
  std::string out;
  auto u32 = [&out](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&out](uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); };
  auto section = [&](uint32_t kind, uint64_t count, const std::string& payload) {
    u32(kind);
    u32(0);
    u64(count);
    u64(payload.size());
    u64(checksum64(payload.data(), payload.size()));
    out += payload;
    out.append((8 - payload.size() % 8) % 8, '\0');
  };
  out.append(kBinaryMagic, 8);
  u32(kBinaryVersion);
  u32(32);
  u64(3);
  u64(0);
  section(1, 1, meta);
  section(2, 1, std::string(4, '\0'));
  section(9, 0, "");
  return out;
}

}  // namespace

TEST_CASE("hostile JSON: numbers beyond a double, deep nesting, in every reader", "[formats]") {
  // Found by fuzz_native_json / fuzz_kineto: nlohmann reports "1e400" as
  // out_of_range, not parse_error; both must become TraceError(malformed).
  CHECK(error_kind_of([] {
          read_trace_json(R"({"format":"shardscope.trace","version":1,"x":1e400})");
        }) == ErrorKind::malformed);
  const std::string ok = binary_with_metadata(R"({"source":"simulator"})");
  CHECK(read_trace_binary(ok.data(), ok.size()).meta.source == Source::simulator);
  const std::string big = binary_with_metadata(R"({"source":"simulator","x":31e308})");
  CHECK(error_kind_of([&] { read_trace_binary(big.data(), big.size()); }) == ErrorKind::malformed);
  // Deep nesting in the metadata (the policy is printed recursively later).
  const std::string deep =
      binary_with_metadata(R"({"source":"simulator","policy":)" + std::string(100000, '[') +
                           std::string(100000, ']') + "}");
  CHECK(error_kind_of([&] { read_trace_binary(deep.data(), deep.size()); }) ==
        ErrorKind::malformed);
}

TEST_CASE("binary form: what it cannot hold is an error naming the limit", "[binary]") {
  // 2^32 events of one rank (230 GiB in memory) cannot be built here: the
  // writers' check is fed the counts.
  CHECK_NOTHROW(check_binary_limit("t.bin", "ranks/0/events", "events of rank 0", kBinaryMaxPerRank,
                                   kBinaryMaxPerRank));
  try {
    check_binary_limit("t.bin", "ranks/3/events", "events of rank 7", 4294967296ULL,
                       kBinaryMaxPerRank);
    FAIL("no error");
  } catch (const TraceError& e) {
    CHECK(e.kind() == ErrorKind::schema);
    CHECK(e.position() == "ranks/3/events");
    CHECK(std::string(e.what()) ==
          "t.bin: ranks/3/events: 4294967296 events of rank 7: more than the binary form holds "
          "(its limit: 4294967295)");
  }
  CHECK(kBinaryMaxPerRank == 4294967295ULL);
  CHECK(kBinaryMaxStringBytes == 4294967295ULL);
}
