// PyTorch memory snapshots (traces/memory_snapshot.h): the committed H200
// snapshots, pickled by tests/traces/fixtures/memory_snapshots/make_pickles.py,
// read back with exactly the JSON's segments and allocations; import's
// counters; the writer's pickle read back; `import --memory-snapshot` end to
// end, refusing a hostile pickle with exit 2 and no output.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"
#include "tests/temp_dir.h"
#include "traces/error.h"
#include "traces/memory_snapshot.h"
#include "traces/metrics.h"
#include "traces/pickle_write.h"
#include "traces/trace_io.h"

using namespace shardscope::traces;
namespace fs = std::filesystem;

namespace {

const std::string kSource = SHARDSCOPE_SOURCE_DIR;
const std::string kCompacted = kSource + "/tests/reference/cuda/snapshots/";
const std::string kPickles = kSource + "/tests/traces/fixtures/memory_snapshots/";

nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

std::vector<std::string> compacted_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kCompacted)) {
    const std::string f = e.path().filename().string();
    const std::string suffix = ".segments.json";
    if (f.size() > suffix.size() && f.compare(f.size() - suffix.size(), suffix.size(), suffix) == 0)
      names.push_back(f.substr(0, f.size() - suffix.size()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

int64_t rounded(int64_t requested) {
  return requested < 512 ? 512 : (requested + 511) / 512 * 512;
}

std::string describe(const SnapshotFrame& f) {
  return f.filename + ":" + std::to_string(f.line) + ":" + f.name;
}

// Any TraceError's message.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const TraceError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("memory snapshot: the committed H200 snapshots read back with the JSON's exact totals") {
  const std::vector<std::string> names = compacted_names();
  REQUIRE(names.size() == 12);
  for (const std::string& name : names) {
    INFO(name);
    const nlohmann::json j = load_json(kCompacted + name + ".segments.json");
    const MemorySnapshot s = load_memory_snapshot(kPickles + name + ".pickle.gz");

    REQUIRE(s.segments.size() == j["segments"].size());
    int64_t reserved = 0, allocated = 0;
    for (size_t i = 0; i < s.segments.size(); ++i) {
      const nlohmann::json& js = j["segments"][i];
      const SnapshotSegment& seg = s.segments[i];
      CHECK(seg.device == 0);
      CHECK(seg.total_size == js["total_size"].get<uint64_t>());
      CHECK(seg.allocated_size == js["allocated_size"].get<uint64_t>());
      CHECK(seg.stream == js["stream"].get<int64_t>());
      CHECK(seg.segment_type == js["segment_type"].get<std::string>());
      REQUIRE(seg.blocks.size() == js["blocks"].size());
      uint64_t at = seg.address;
      for (size_t b = 0; b < seg.blocks.size(); ++b) {
        CHECK(seg.blocks[b].size == js["blocks"][b][0].get<uint64_t>());
        CHECK(seg.blocks[b].state == js["blocks"][b][1].get<std::string>());
        CHECK(seg.blocks[b].address == at);  // the blocks tile the segment
        at += seg.blocks[b].size;
      }
      CHECK(at == seg.address + seg.total_size);
      reserved += js["total_size"].get<int64_t>();
      allocated += js["allocated_size"].get<int64_t>();
    }

    const nlohmann::json& allocs = j["measured_step_allocs"];
    REQUIRE(s.device_traces.size() == 1);
    const std::vector<SnapshotEvent>& trace = s.device_traces[0];
    REQUIRE(trace.size() == 3 * allocs.size());
    int64_t largest = 0;
    for (size_t i = 0; i < allocs.size(); ++i) {
      const SnapshotEvent& e = trace[3 * i];
      CHECK(e.action == "alloc");
      CHECK(e.size == allocs[i][0].get<uint64_t>());
      CHECK(e.stream == allocs[i][1].get<int64_t>());
      REQUIRE(e.frames.size() == 1);
      CHECK(describe(e.frames[0]) == allocs[i][2].get<std::string>());
      CHECK(trace[3 * i + 1].action == "free_requested");
      CHECK(trace[3 * i + 2].action == "free_completed");
      largest = std::max(largest, rounded(allocs[i][0].get<int64_t>()));
    }

    Trace t;
    SnapshotImportSummary sum;
    add_memory_snapshot_rank(t, s, 0, name, &sum);
    CHECK(sum.final_reserved == reserved);
    CHECK(sum.final_allocated == allocated);
    CHECK(sum.initial_allocated == allocated);  // each allocation is freed at once
    CHECK(sum.initial_reserved == reserved);
    CHECK(sum.allocations == static_cast<int64_t>(allocs.size()));
    CHECK(sum.frees == static_cast<int64_t>(allocs.size()));
    CHECK(sum.skipped == static_cast<int64_t>(allocs.size()));  // free_completed
    REQUIRE(t.ranks[0].memory.size() == 1 + 2 * allocs.size());
    const Metrics m = compute_metrics(t);
    CHECK(m.total.peak_reserved_bytes == reserved);
    CHECK(m.total.peak_allocated_bytes == allocated + largest);
  }
  // The plain pickle (what pickle.dump writes, uncompressed) reads the same.
  const std::string plain = "gpt2-h128-l2-fsdp2-fp32-w2-b2-t128-rafT-ac0";
  const MemorySnapshot a = load_memory_snapshot(kPickles + plain + ".pickle");
  const MemorySnapshot b = load_memory_snapshot(kPickles + plain + ".pickle.gz");
  CHECK(memory_snapshot_pickle(a) == memory_snapshot_pickle(b));
  CHECK(a.segments.size() == 14);
}

TEST_CASE("memory snapshot: import works back the counters before the trace from the segments") {
  // One 20 MiB segment holding a live 4 MiB block at the end; the trace made
  // the segment, allocated 1000 B (freed) and the 4 MiB block (live).
  MemorySnapshot s;
  SnapshotSegment seg;
  seg.address = 0x1000000;
  seg.total_size = 20 << 20;
  seg.segment_type = "large";
  seg.blocks = {{0x1000000, 4 << 20, (4 << 20) - 5, "active_allocated", {}},
                {0x1400000, 16 << 20, 0, "inactive", {}}};
  s.segments.push_back(seg);
  // A second, older segment the trace never touches.
  SnapshotSegment old = seg;
  old.address = 0x9000000;
  old.total_size = 2 << 20;
  old.segment_type = "small";
  old.stream = 7;
  old.blocks = {{0x9000000, 512, 300, "active_allocated", {}},
                {0x9000200, (2 << 20) - 512, 0, "inactive", {}}};
  s.segments.push_back(old);
  s.device_traces.resize(1);
  auto ev = [](const char* action, uint64_t addr, uint64_t size, int64_t t) {
    SnapshotEvent e;
    e.action = action;
    e.addr = addr;
    e.size = size;
    e.time_us = t;
    return e;
  };
  s.device_traces[0] = {ev("segment_alloc", 0x1000000, 20 << 20, 10),
                        ev("alloc", 0x1000000, 1000, 11),
                        ev("free_requested", 0x1000000, 1000, 12),
                        ev("free_completed", 0x1000000, 1000, 13),
                        ev("alloc", 0x1000000, (4 << 20) - 5, 9),  // earlier: takes 13
                        ev("oom", 0, 1, 14)};
  Trace t;
  SnapshotImportSummary sum;
  add_memory_snapshot_rank(t, s, 3, "s", &sum);
  CHECK(sum.initial_allocated == 512);
  CHECK(sum.initial_reserved == 2 << 20);
  CHECK(sum.final_allocated == (4 << 20) + 512);
  CHECK(sum.final_reserved == 22 << 20);
  CHECK(sum.skipped == 2);
  const RankTrace& r = t.ranks[0];
  CHECK(r.rank == 3);
  REQUIRE(r.memory.size() == 5);
  const int64_t expect_alloc[] = {512, 512, 512 + 1024, 512, (4 << 20) + 512};
  const int64_t expect_reserved[] = {2 << 20, 22 << 20, 22 << 20, 22 << 20, 22 << 20};
  const int64_t expect_time[] = {10000, 10000, 11000, 12000, 13000};
  for (size_t i = 0; i < 5; ++i) {
    INFO(i);
    CHECK(r.memory[i].allocated == expect_alloc[i]);
    CHECK(r.memory[i].reserved == expect_reserved[i]);
    CHECK(r.memory[i].time_ns == expect_time[i]);
  }
  CHECK(r.memory[4].bytes == 4 << 20);  // the live block's size from the segments
  CHECK(t.str(r.lanes[r.memory[1].lane].name) == "allocator stream 0");
  CHECK(r.lanes.size() == 2);  // stream 0 and the old segment's stream 7

  // A trace that allocates more than the segments end with is refused.
  s.segments.pop_back();
  s.segments[0].blocks[0].state = "inactive";
  Trace bad;
  CHECK_THAT(error_of([&] { add_memory_snapshot_rank(bad, s, 0, "s.pickle"); }),
             Catch::Contains("s.pickle: /device_traces/0: the trace allocates more than the "
                             "segments hold at the end"));
  CHECK(bad.ranks.empty());
}

TEST_CASE("memory snapshot: the writer's pickle reads back field for field") {
  MemorySnapshot s;
  SnapshotSegment seg;
  seg.device = 0;
  seg.address = 0x7f0000000000;
  seg.total_size = 2 << 20;
  seg.stream = 3;
  seg.segment_type = "small";
  seg.allocated_size = 1024;
  seg.active_size = 1536;
  seg.requested_size = 1400;
  seg.frames = {{"shardscope activations", 0, "m0.act.h.0.out [unit h.0]"}};
  seg.blocks = {{0x7f0000000000, 1024, 1000, "active_allocated", seg.frames},
                {0x7f0000000400, 512, 400, "active_pending_free", {}},
                {0x7f0000000600, (2 << 20) - 1536, 0, "inactive", {}}};
  s.segments.push_back(seg);
  SnapshotEvent e;
  e.action = "oom";
  e.size = 1 << 30;
  e.stream = 3;
  e.time_us = 123456789012;
  e.device_free = 5;
  s.device_traces = {{e}, {}};
  const std::string bytes = memory_snapshot_pickle(s);
  const MemorySnapshot back = memory_snapshot_from_pickle(pickle::read_pickle(bytes), "w");
  CHECK(memory_snapshot_pickle(back) == bytes);
  REQUIRE(back.segments.size() == 1);
  CHECK(back.segments[0].address == 0x7f0000000000);
  CHECK(back.segments[0].blocks[1].state == "active_pending_free");
  CHECK(back.segments[0].blocks[0].frames[0].name == "m0.act.h.0.out [unit h.0]");
  REQUIRE(back.device_traces.size() == 2);
  CHECK(back.device_traces[0][0].device_free == 5);
  CHECK(back.device_traces[0][0].time_us == 123456789012);
}

TEST_CASE("memory snapshot: fields of the wrong type or missing are errors naming their path") {
  pickle::Writer w;
  w.begin_dict();
  w.key("segments");
  w.begin_list();
  w.begin_dict();
  w.key("device");
  w.integer(0);
  w.key("address");
  w.str("0x10");
  w.end_dict();
  w.end_list();
  w.key("device_traces");
  w.begin_list();
  w.end_list();
  w.end_dict();
  const std::string bytes = w.finish();
  CHECK(error_of([&] { memory_snapshot_from_pickle(pickle::read_pickle(bytes), "m.pickle"); }) ==
        "m.pickle: /segments/0/address: expected an int, found a str");
  pickle::Writer empty;
  empty.begin_dict();
  empty.end_dict();
  const std::string none = empty.finish();
  CHECK(error_of([&] { memory_snapshot_from_pickle(pickle::read_pickle(none), "e.pickle"); }) ==
        "e.pickle: /: missing key \"segments\"");
  SnapshotLimits few;
  few.max_entries = 10;
  CHECK_THAT(error_of([&] {
               load_memory_snapshot(kPickles + "gpt2-h128-l2-fsdp2-fp32-w2-b2-t128-rafT-ac0.pickle",
                                    few);
             }),
             Catch::Contains("more than 10 segments, blocks and trace entries (the limit)"));
}

TEST_CASE(
    "memory snapshot: import --memory-snapshot writes a trace report reads, a hostile "
    "pickle exits 2 naming the opcode and writes nothing") {
  shardscope::test::TempDir dir("shardscope_snapshot_cli");
  const std::string out = (dir.path / "snap.json").string();
  const std::string fixture = kPickles + "gpt2-h128-l2-fsdp2-fp32-w2-b2-t128-rafT-ac0.pickle";
  const auto r = shardscope::test::run_cli("import --memory-snapshot " + fixture + " --out " + out);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("14 segments, 744 trace entries (248 alloc, 248 "
                                       "free_requested, 0 segment actions, 248 without a record)"));
  const auto report = shardscope::test::run_cli("report " + out + " --json");
  REQUIRE(report.status == 0);
  const nlohmann::json m = nlohmann::json::parse(report.output);
  CHECK(m["source"] == "memory-snapshot");
  CHECK(m["peak_reserved_bytes"] == 92274688);
  CHECK(m["peak_allocated_bytes"] == 71651328 + 1024000);  // + the largest allocation

  const std::string hostile = (dir.path / "evil.pickle").string();
  {
    std::ofstream f(hostile, std::ios::binary);
    // pickle.dumps({'segments': [E()]}, 4) where E.__reduce__ returns
    // (os.system, ('id',)): STACK_GLOBAL at byte 43, then REDUCE.
    const std::string hex =
        "8004952e000000000000007d948c087365676d656e7473945d948c05706f736978948c0673797374656d94"
        "93948c026964948594529461732e";
    for (size_t i = 0; i < hex.size(); i += 2)
      f.put(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  const std::string bad_out = (dir.path / "bad.json").string();
  const auto refused =
      shardscope::test::run_cli("import --memory-snapshot " + hostile + " --out " + bad_out);
  CHECK(refused.status == 2);
  CHECK_THAT(refused.output,
             Catch::Contains("evil.pickle: byte 43: opcode 0x93 (STACK_GLOBAL): refused: it "
                             "imports a Python global"));
  CHECK_FALSE(fs::exists(bad_out));
}
