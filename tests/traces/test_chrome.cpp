// Chrome/Kineto export, and the checker every export goes through.
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tests/temp_dir.h"
#include "tests/traces/sample_traces.h"
#include "traces/chrome_check.h"
#include "traces/chrome_export.h"
#include "traces/file_io.h"
#include "traces/kineto_import.h"
#include "traces/metrics.h"

using namespace shardscope::traces;
using nlohmann::json;
using shardscope::traces::testing::ev;

namespace {

json exported(const Trace& t, const std::vector<int32_t>& ranks = {}) {
  const std::string text = chrome_trace_string(t, ranks);
  const auto issues = check_chrome_trace(text);
  INFO(format_chrome_issues(issues));
  CHECK(issues.empty());
  return json::parse(text);
}

std::vector<json> events_where(const json& doc, const std::string& key, const std::string& value) {
  std::vector<json> out;
  for (const json& e : doc["traceEvents"])
    if (e.contains(key) && e[key] == value) out.push_back(e);
  return out;
}

std::set<std::string> rules_broken(const std::string& text) {
  std::set<std::string> rules;
  for (const ChromeIssue& i : check_chrome_trace(text)) rules.insert(i.rule);
  return rules;
}

}  // namespace

TEST_CASE("export: Kineto top level, one process per rank, threads in lane order", "[chrome]") {
  const json doc = exported(testing::sample_trace());
  CHECK(doc["schemaVersion"] == 1);
  CHECK(doc["deviceProperties"].size() == 2);
  CHECK(doc["distributedInfo"]["rank"] == 0);
  CHECK(doc["distributedInfo"]["world_size"] == 2);
  CHECK(doc["distributedInfo"]["backend"] == "nccl");
  CHECK(doc["baseTimeNanoseconds"] == 1'000'000'000);
  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, std::string> threads;
  std::map<std::pair<int, int>, int> sort_index;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "M") continue;
    if (e["name"] == "process_name") processes[e["pid"]] = e["args"]["name"];
    if (e["name"] == "thread_name") threads[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (e["name"] == "thread_sort_index")
      sort_index[{e["pid"], e["tid"]}] = e["args"]["sort_index"];
  }
  CHECK(processes == std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}});
  // Host first, then compute, communication, copies.
  // Last, the launches synthesized for HTA (the sample has no launch links).
  std::vector<std::string> order(5);
  for (const auto& [key, name] : threads)
    if (key.first == 0) order.at(static_cast<size_t>(sort_index.at(key))) = name;
  CHECK(order ==
        std::vector<std::string>{"host", "compute", "comm", "h2d", "launches (synthesized)"});
}

TEST_CASE("export: kernels, NCCL names, memcpy/memset categories and device args", "[chrome]") {
  const json doc = exported(testing::sample_trace(), {1});
  CHECK(doc["distributedInfo"]["rank"] == 1);
  int kernels = 0, nccl = 0;
  for (const json& e : events_where(doc, "cat", "kernel")) {
    ++kernels;
    CHECK(e["pid"] == 1);
    CHECK(e["args"]["device"] == 1);
    CHECK(e["args"].contains("stream"));
    CHECK(e["args"].contains("correlation"));
    const std::string name = e["name"];
    if (name.rfind("ncclDevKernel_", 0) == 0) ++nccl;
  }
  CHECK(kernels == 10);  // 2 steps x (fc1, gelu, ag, rs, ar)
  CHECK(nccl == 6);
  const auto ag = events_where(
      doc, "name", "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)");
  REQUIRE(ag.size() == 2);
  CHECK(ag[0]["args"]["shardscope_name"] == "all_gather h.0");
  CHECK(ag[0]["args"]["stream"] == 13);
  CHECK(ag[0]["args"]["bytes"] == 4 << 20);
  CHECK(events_where(doc, "name",
                     "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, "
                     "unsigned long, ncclWork*)")
            .size() == 2);
  const auto copies = events_where(doc, "cat", "gpu_memcpy");
  REQUIRE(copies.size() == 2);
  CHECK(copies[0]["name"] == "Memcpy HtoD (Host -> Device)");
  CHECK(events_where(doc, "cat", "gpu_memset").size() == 2);
  CHECK(events_where(doc, "cat", "cuda_sync").size() == 2);
  // Host markers are user annotations; the fc1 kernel keeps its correlation.
  CHECK(events_where(doc, "name", "forward").at(0)["cat"] == "user_annotation");
  CHECK(events_where(doc, "name", "h.0.mlp.fc1 fwd").at(0)["args"]["correlation"] == 100);
}

TEST_CASE("export: microsecond timestamps with nanosecond decimals from a common base",
          "[chrome]") {
  Trace t;
  RankTrace& r = t.add_rank(0);
  const uint32_t lane = t.add_lane(r, "compute", LaneKind::compute);
  ev(t, r, lane, "a", Category::compute, 5'000'000'000'000, 1);
  ev(t, r, lane, "b", Category::compute, 5'000'001'234'567, 1'001);
  const std::string text = chrome_trace_string(t);
  CHECK(text.find("\"ts\":0.000,\"dur\":0.001") != std::string::npos);
  CHECK(text.find("\"ts\":1234.567,\"dur\":1.001") != std::string::npos);
  CHECK(text.find("\"baseTimeNanoseconds\":5000000000000") != std::string::npos);
}

TEST_CASE("export: partially overlapping events move to extra threads", "[chrome]") {
  Trace t;
  RankTrace& r = t.add_rank(0);
  const uint32_t lane = t.add_lane(r, "compute", LaneKind::compute);
  ev(t, r, lane, "a", Category::compute, 0, 100);
  ev(t, r, lane, "b", Category::compute, 50, 100);  // overlaps a partially
  ev(t, r, lane, "c", Category::compute, 60, 10);   // nested in a and b: stays with a
  ev(t, r, lane, "d", Category::compute, 90, 100);  // overlaps a and b partially
  const json doc = exported(t);
  std::map<int, std::string> names;
  for (const json& e : events_where(doc, "name", "thread_name"))
    names[e["tid"]] = e["args"]["name"];
  std::set<std::string> thread_names;
  for (const auto& [tid, name] : names) thread_names.insert(name);
  CHECK(thread_names ==
        std::set<std::string>{"compute", "compute (2)", "compute (3)", "launches (synthesized)"});
  std::map<std::string, std::string> thread_of;
  for (const json& e : events_where(doc, "ph", "X")) thread_of[e["name"]] = names[e["tid"]];
  CHECK(thread_of["a"] == "compute");
  CHECK(thread_of["c"] == "compute");
  CHECK(thread_of["b"] == "compute (2)");
  CHECK(thread_of["d"] == "compute (3)");
}

TEST_CASE("export: memory counters, [memory] instants, flows and step annotations", "[chrome]") {
  const json doc = exported(testing::sample_trace(), {0});
  const auto counters = events_where(doc, "ph", "C");
  REQUIRE(counters.size() == 8);
  CHECK(counters[1]["args"]["allocated"] == 4 << 20);
  CHECK(counters[1]["args"]["reserved"] == 8 << 20);
  const auto instants = events_where(doc, "name", "[memory]");
  REQUIRE(instants.size() == 8);
  CHECK(instants[0]["cat"] == "cpu_instant_event");
  CHECK(instants[0]["args"]["Bytes"] == 1 << 20);
  CHECK(instants[0]["args"]["Device Id"] == 0);
  const auto starts = events_where(doc, "ph", "s");
  const auto ends = events_where(doc, "ph", "f");
  REQUIRE(starts.size() == 2);
  REQUIRE(ends.size() == 2);
  CHECK(ends[0]["bp"] == "e");
  CHECK(starts[0]["id"] == ends[0]["id"]);
  CHECK(starts[0]["tid"] != ends[0]["tid"]);  // comm stream -> compute stream
  const auto steps = events_where(doc, "cat", "user_annotation");
  int profiler_steps = 0;
  for (const json& e : steps)
    if (e["name"] == "ProfilerStep#1" || e["name"] == "ProfilerStep#2") ++profiler_steps;
  CHECK(profiler_steps == 2);
  // Steps only on the host: HTA takes any "ProfilerStep" row as a step.
  CHECK(events_where(doc, "cat", "gpu_user_annotation").empty());
  // HTA finds the rank with the pattern "rank":\s+(\d+): the blank matters.
  CHECK(chrome_trace_string(testing::sample_trace(), {1}).find("\"rank\": 1,") !=
        std::string::npos);
  // The sync on the compute stream carries no "stream" (HTA would count it
  // busy); its stream stays in shardscope_stream.
  for (const json& e : doc["traceEvents"])
    if (e.contains("name") && e["name"] == "wait rs") {
      CHECK_FALSE(e["args"].contains("stream"));
      CHECK(e["args"]["shardscope_stream"] == 7);
    }
}

TEST_CASE("export: strings are escaped, control characters blanked", "[chrome]") {
  Trace t;
  RankTrace& r = t.add_rank(0);
  const uint32_t lane = t.add_lane(r, "lane \"q\"\n", LaneKind::compute);
  ev(t, r, lane, "bad \x01\x1f name \\ \"x\"\n\xff end", Category::compute, 0, 1);
  const std::string text = chrome_trace_string(t);
  CHECK(check_chrome_trace(text).empty());
  const json doc = json::parse(text);
  CHECK(events_where(doc, "ph", "X").at(0)["name"] == "bad    name \\ \"x\" \xef\xbf\xbd end");
}

TEST_CASE("export --per-rank: one file per rank with its own distributedInfo.rank", "[chrome]") {
  const shardscope::test::TempDir tmp("shardscope_chrome");
  const std::string dir = (tmp.path / "out").string();
  const auto paths = export_chrome_per_rank(testing::sample_trace(), dir);
  REQUIRE(paths.size() == 2);
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(paths[static_cast<size_t>(rank)] == dir + "/rank" + std::to_string(rank) + ".json");
    const std::string text = read_file(paths[static_cast<size_t>(rank)]);
    CHECK(check_chrome_trace(text).empty());
    const json doc = json::parse(text);
    CHECK(doc["distributedInfo"]["rank"] == rank);
    for (const json& e : doc["traceEvents"]) CHECK(e["pid"] == rank);
  }
}

TEST_CASE("export then import keeps events, steps, memory and metrics", "[chrome][kineto]") {
  const Trace t = testing::sample_trace();
  for (int32_t rank : {0, 1}) {
    const Trace back = import_kineto_text(chrome_trace_string(t, {rank}));
    const RankTrace& a = t.ranks[static_cast<size_t>(rank)];
    REQUIRE(back.ranks.size() == 1);
    const RankTrace& b = back.ranks[0];
    CHECK(b.rank == rank);
    CHECK(b.steps.size() == 2);
    CHECK(b.memory.size() == a.memory.size());
    // Every event comes back, host ones too; the launches synthesized for HTA
    // (the sample has no launch links) do not.
    CHECK(b.events.size() == a.events.size());
    CHECK(b.flows.empty());
    const Metrics ma = compute_metrics(t);
    const Metrics mb = compute_metrics(back);
    const RankMetrics& x = ma.ranks[static_cast<size_t>(rank)];
    const RankMetrics& y = mb.ranks[0];
    CHECK(y.compute_ms == Approx(x.compute_ms));
    CHECK(y.comm_ms == Approx(x.comm_ms));
    CHECK(y.exposed_comm_ms == Approx(x.exposed_comm_ms));
    CHECK(y.idle_ms + y.step_time_ms > 0);
    CHECK(y.peak_allocated_bytes == x.peak_allocated_bytes);
    CHECK(y.peak_reserved_bytes == x.peak_reserved_bytes);
    // Names and categories come back through shardscope_name / shardscope_category
    // (control characters become spaces in Chrome exports).
    std::multiset<std::string> names_a, names_b;
    for (const Event& e : a.events) {
      std::string name(t.str(e.name));
      for (char& c : name)
        if (static_cast<unsigned char>(c) < 0x20) c = ' ';
      names_a.insert(name + "|" + category_name(e.category));
    }
    for (const Event& e : b.events)
      names_b.insert(std::string(back.str(e.name)) + "|" + category_name(e.category));
    CHECK(names_a == names_b);
    // Device events keep their correlation ids: invented ones are cleared again.
    std::multiset<uint32_t> corr_a, corr_b;
    for (const Event& e : a.events) corr_a.insert(e.correlation);
    for (const Event& e : b.events) corr_b.insert(e.correlation);
    CHECK(corr_a == corr_b);
  }
}

TEST_CASE("random traces export cleanly", "[chrome]") {
  for (uint32_t seed = 0; seed < 5; ++seed) {
    const Trace t = testing::random_trace(seed, 2, static_cast<int>(seed % 3), 300);
    const std::string text = chrome_trace_string(t);
    const auto issues = check_chrome_trace(text);
    INFO(format_chrome_issues(issues));
    CHECK(issues.empty());
  }
}

TEST_CASE("checker: every rule has a failing example", "[chrome][checker]") {
  auto wrap = [](const std::string& events) { return "{\"traceEvents\":[" + events + "]}"; };
  const std::string ok = R"({"ph":"X","name":"a","pid":0,"tid":1,"ts":0,"dur":10})";
  CHECK(rules_broken(wrap(ok)).empty());
  CHECK(rules_broken("{\"traceEvents\":[") == std::set<std::string>{"json"});
  CHECK(rules_broken("{\"events\":[]}") == std::set<std::string>{"json"});
  CHECK(rules_broken("[1e400]") == std::set<std::string>{"json"});
  CHECK(rules_broken(wrap(R"({"name":"no ph","pid":0,"tid":1,"ts":0})")) ==
        std::set<std::string>{"event"});
  CHECK(rules_broken(wrap(R"({"ph":"X","name":"a","tid":1,"ts":0,"dur":1})")) ==
        std::set<std::string>{"event"});
  CHECK(rules_broken(wrap(R"({"ph":"i","name":"a","pid":0,"tid":1})")) ==
        std::set<std::string>{"ts"});
  CHECK(rules_broken(wrap(R"({"ph":"X","name":"a","pid":0,"tid":1,"ts":"0","dur":1})")) ==
        std::set<std::string>{"ts"});
  CHECK(rules_broken(wrap(R"({"ph":"X","name":"a","pid":0,"tid":1,"ts":0})")) ==
        std::set<std::string>{"dur"});
  CHECK(rules_broken(wrap(R"({"ph":"X","name":"a","pid":0,"tid":1,"ts":0,"dur":-1})")) ==
        std::set<std::string>{"dur"});
  // B/E: an E with no B, a B never closed, crossed names.
  CHECK(rules_broken(wrap(R"({"ph":"E","pid":0,"tid":1,"ts":5})")) ==
        std::set<std::string>{"begin_end"});
  CHECK(rules_broken(wrap(R"({"ph":"B","name":"a","pid":0,"tid":1,"ts":5})")) ==
        std::set<std::string>{"begin_end"});
  CHECK(rules_broken(wrap(R"({"ph":"B","name":"a","pid":0,"tid":1,"ts":0},)"
                          R"({"ph":"B","name":"b","pid":0,"tid":1,"ts":1},)"
                          R"({"ph":"E","name":"a","pid":0,"tid":1,"ts":2},)"
                          R"({"ph":"E","name":"b","pid":0,"tid":1,"ts":3})")) ==
        std::set<std::string>{"begin_end"});
  CHECK(rules_broken(wrap(R"({"ph":"B","name":"a","pid":0,"tid":1,"ts":0},)"
                          R"({"ph":"E","pid":0,"tid":1,"ts":2})"))
            .empty());
  // Partial overlap on one thread; the same on two threads, or nested, is fine.
  CHECK(rules_broken(wrap(ok + R"(,{"ph":"X","name":"b","pid":0,"tid":1,"ts":5,"dur":10})")) ==
        std::set<std::string>{"overlap"});
  CHECK(
      rules_broken(wrap(ok + R"(,{"ph":"X","name":"b","pid":0,"tid":2,"ts":5,"dur":10})")).empty());
  CHECK(
      rules_broken(wrap(ok + R"(,{"ph":"X","name":"b","pid":0,"tid":1,"ts":5,"dur":5})")).empty());
  CHECK(rules_broken(
            wrap(ok + R"(,{"ph":"X","name":"b","pid":0,"tid":1,"ts":0.001,"dur":9.9995})")) ==
        std::set<std::string>{"overlap"});  // 1 ns past the end, at nanosecond precision
  // Flows: an unmatched start, an end with another name, a missing id.
  CHECK(rules_broken(wrap(R"({"ph":"s","id":1,"cat":"c","name":"n","pid":0,"tid":1,"ts":0})")) ==
        std::set<std::string>{"flow"});
  CHECK(rules_broken(
            wrap(R"({"ph":"s","id":1,"cat":"c","name":"n","pid":0,"tid":1,"ts":0},)"
                 R"({"ph":"f","id":1,"cat":"c","name":"m","pid":0,"tid":1,"ts":1,"bp":"e"})")) ==
        std::set<std::string>{"flow"});
  CHECK(rules_broken(
            wrap(R"({"ph":"s","id":1,"cat":"c","name":"n","pid":0,"tid":1,"ts":0},)"
                 R"({"ph":"f","id":1,"cat":"c","name":"n","pid":0,"tid":1,"ts":1,"bp":"e"})"))
            .empty());
  CHECK(rules_broken(wrap(R"({"ph":"f","cat":"c","name":"n","pid":0,"tid":1,"ts":1})")) ==
        std::set<std::string>{"flow"});
  // Counters: a string value, no args.
  CHECK(rules_broken(wrap(R"({"ph":"C","name":"m","pid":0,"tid":0,"ts":0,"args":{"v":"1"}})")) ==
        std::set<std::string>{"counter"});
  CHECK(rules_broken(wrap(R"({"ph":"C","name":"m","pid":0,"tid":0,"ts":0})")) ==
        std::set<std::string>{"counter"});
  // Control characters, escaped in the JSON text: in a value, in a key, at the top level.
  CHECK(rules_broken(wrap(R"({"ph":"X","name":"a\nb","pid":0,"tid":1,"ts":0,"dur":1})")) ==
        std::set<std::string>{"control"});
  CHECK(rules_broken(
            wrap(R"({"ph":"X","name":"a","pid":0,"tid":1,"ts":0,"dur":1,"args":{"k\u0001":1}})")) ==
        std::set<std::string>{"control"});
  CHECK(rules_broken(R"({"traceName":"x\ty","traceEvents":[]})") ==
        std::set<std::string>{"control"});
  // A raw control character is not JSON at all.
  CHECK(rules_broken(
            wrap("{\"ph\":\"X\",\"name\":\"a\x01\",\"pid\":0,\"tid\":1,\"ts\":0,\"dur\":1}")) ==
        std::set<std::string>{"json"});
}
