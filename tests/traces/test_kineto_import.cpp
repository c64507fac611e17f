// Kineto (PyTorch profiler) import, on hand-written fixtures in Kineto's
// format (tests/traces/fixtures/kineto_rank{0,1}.json). Expected values are
// worked out in the comments from the fixture timestamps (microseconds).
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>

#include "traces/chrome_check.h"
#include "traces/chrome_export.h"
#include "traces/error.h"
#include "traces/file_io.h"
#include "traces/kineto_import.h"
#include "traces/metrics.h"
#include "traces/trace_io.h"

using namespace shardscope::traces;

namespace {

const std::string kFixtures = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/traces/fixtures/";
constexpr int64_t kBase = 1700000000000000000;  // baseTimeNanoseconds
constexpr int64_t us(double micros) {
  return kBase + static_cast<int64_t>(micros * 1000);
}
constexpr double kUsToMs = 1e-3;
constexpr int64_t kMiB = 1 << 20;

std::map<std::string, int> count_categories(const RankTrace& r) {
  std::map<std::string, int> n;
  for (const Event& e : r.events) ++n[category_name(e.category)];
  return n;
}

}  // namespace

TEST_CASE("Kineto import: GPU events on their streams, NCCL kernels by collective", "[kineto]") {
  const Trace t = import_kineto({kFixtures + "kineto_rank0.json", kFixtures + "kineto_rank1.json"});
  CHECK(t.meta.source == Source::kineto);
  CHECK(t.meta.world_size == 2);
  CHECK(t.meta.hardware == "NVIDIA H100 80GB HBM3");
  REQUIRE(t.ranks.size() == 2);
  const RankTrace& r0 = t.ranks[0];
  CHECK(r0.rank == 0);
  CHECK(r0.device == 0);
  // 13 device events and 2 host ones (aten::mm, cudaLaunchKernel); the
  // ProfilerStep ranges become steps; flow events and the Trace span are not
  // imported.
  CHECK(r0.events.size() == 15);
  const auto n = count_categories(r0);
  CHECK(n.at("compute") == 4);
  CHECK(n.at("comm.all_gather") == 2);
  CHECK(n.at("comm.reduce_scatter") == 2);  // ncclKernel_ (old) and ncclDevKernel_ (new) names
  CHECK(n.at("comm.all_reduce") == 1);
  CHECK(n.at("comm.other") == 1);  // SendRecv
  CHECK(n.at("memcpy.h2d") == 1);
  CHECK(n.at("memcpy.d2h") == 1);
  CHECK(n.at("memset") == 1);
  CHECK(n.at("host") == 2);
  // Lanes: host, compute, comm, copy order; named after the thread (or
  // "stream N", "host thread N").
  REQUIRE(r0.lanes.size() == 4);
  CHECK(t.str(r0.lanes[0].name) == "host thread 4242");
  CHECK(r0.lanes[0].kind == LaneKind::host);
  CHECK(t.str(r0.lanes[1].name) == "stream 7");
  CHECK(r0.lanes[1].kind == LaneKind::compute);
  CHECK(r0.lanes[1].stream == 7);
  CHECK(t.str(r0.lanes[2].name) == "stream 13");
  CHECK(r0.lanes[2].kind == LaneKind::comm);
  CHECK(t.str(r0.lanes[3].name) == "stream 21");
  CHECK(r0.lanes[3].kind == LaneKind::copy);
  // Host events keep their Kineto category in op; the launch is linked to its
  // kernel by correlation 101.
  const Event& mm = r0.events[1];
  CHECK(t.str(mm.name) == "aten::mm");
  CHECK(mm.category == Category::host);
  CHECK(t.str(mm.op) == "cpu_op");
  CHECK(mm.start_ns == us(1010.5));
  CHECK(mm.dur_ns == 20'250);
  const Event& launch = r0.events[2];
  CHECK(t.str(launch.op) == "cuda_runtime");
  CHECK(launch.correlation == 101);
  REQUIRE(r0.flows.size() == 1);
  CHECK(r0.flows[0].from == 2);
  const Event& gemm = r0.events[r0.flows[0].to];
  CHECK(gemm.correlation == 101);
  CHECK(gemm.start_ns == us(1020));
  CHECK(is_launch_flow(r0, r0.flows[0]));
  // aten::mm [4096, 4096] x [4096, 4096] in bf16: 2 * 4096^3 FLOPs; bytes =
  // two inputs and the output, 3 * 4096^2 * 2.
  CHECK(gemm.flops == 2ull * 4096 * 4096 * 4096);
  CHECK(gemm.bytes == 3ull * 4096 * 4096 * 2);
  // The first event (sorted by start): the H2D copy at 1005 us, 10 us, 1 MiB, correlation 100.
  const Event& copy = r0.events[0];
  CHECK(t.str(copy.name) == "Memcpy HtoD (Pageable -> Device)");
  CHECK(copy.start_ns == us(1005));
  CHECK(copy.dur_ns == 10'000);
  CHECK(copy.bytes == 1048576);
  CHECK(copy.correlation == 100);
  CHECK(copy.lane == 3);
  // Steps from ProfilerStep#N (CPU annotation), absolute with baseTimeNanoseconds.
  REQUIRE(r0.steps.size() == 2);
  CHECK(r0.steps[0].number == 3);
  CHECK(r0.steps[0].start_ns == us(1000));
  CHECK(r0.steps[0].end_ns == us(1500));
  CHECK(r0.steps[1].number == 4);
  // Device memory only (Device Id -1 is host memory), in time order.
  REQUIRE(r0.memory.size() == 5);
  CHECK(r0.memory[0].time_ns == us(1004));
  CHECK(r0.memory[0].bytes == kMiB);
  CHECK(r0.memory[0].allocated == kMiB);
  CHECK(r0.memory[0].reserved == 20 * kMiB);
  CHECK(r0.memory[0].address == 139637976727552ull);
  CHECK(r0.memory[2].bytes == -kMiB);
  CHECK(t.ranks[1].rank == 1);
  CHECK(t.ranks[1].device == 1);
  CHECK(t.ranks[1].events.size() == 5);
}

TEST_CASE("Kineto import: metrics of the fixtures, worked out by hand", "[kineto]") {
  const Trace t = import_kineto({kFixtures + "kineto_rank1.json", kFixtures + "kineto_rank0.json"});
  // Most fixture kernels have no launch in the file, so this test reads them
  // by their step markers (the launch rule is tested below).
  MetricsOptions markers;
  markers.step_rule = StepRule::markers;
  const Metrics m = compute_metrics(t, markers);
  REQUIRE(m.ranks.size() == 2);
  // Two steps (3, 4): the reported value is step 4 (steps 2..S).
  // Step time: the ProfilerStep range, 500 us on both ranks.
  // Rank 0, step 4: device events [1510, 1860) in [1500, 2000): lag -140 us; COMP [1510,1610)
  // [1650,1750) = 200; COMM [1520,1600) [1700,1720) [1760,1860) = 200; COMM ∩ COMP = 80 + 20 = 100;
  // device busy 300 over the device span [1510, 1860) -> idle 50, non-compute 100.
  // Memory: 4 MiB carried in, 12 MiB at 1600; reserved 32 MiB.
  const RankMetrics& r0 = m.ranks[0];
  CHECK(r0.rank == 0);
  CHECK(r0.step_time_ms == Approx(500 * kUsToMs));
  CHECK(r0.host_device_lag_ms == Approx(-140 * kUsToMs));
  CHECK(r0.compute_ms == Approx(200 * kUsToMs));
  CHECK(r0.comm_ms == Approx(200 * kUsToMs));
  CHECK(r0.exposed_comm_ms == Approx(100 * kUsToMs));
  CHECK(r0.overlap == Approx(0.5));
  CHECK(r0.idle_ms == Approx(50 * kUsToMs));
  CHECK(r0.device_span_ms == Approx(350 * kUsToMs));
  CHECK(r0.non_compute_ms == Approx(100 * kUsToMs));
  CHECK(r0.peak_allocated_bytes == 12 * kMiB);
  CHECK(r0.peak_reserved_bytes == 32 * kMiB);
  // Rank 1, step 4: [1500, 1800) in a 500 us step; COMP 200, COMM 200, ∩ 100; busy 300 -> idle 0.
  const RankMetrics& r1 = m.ranks[1];
  CHECK(r1.step_time_ms == Approx(500 * kUsToMs));
  CHECK(r1.exposed_comm_ms == Approx(100 * kUsToMs));
  CHECK(r1.idle_ms == Approx(0).margin(1e-12));
  CHECK(r1.peak_allocated_bytes == 8 * kMiB);
  CHECK(r1.peak_reserved_bytes == 10 * kMiB);
  // Top level: max step time and peaks, mean of the rest.
  CHECK(m.total.step_time_ms == Approx(500 * kUsToMs));
  CHECK(m.total.idle_ms == Approx(25 * kUsToMs));
  CHECK(m.total.overlap == Approx(0.5));
  CHECK(m.total.peak_allocated_bytes == 12 * kMiB);
  CHECK(m.total.peak_reserved_bytes == 32 * kMiB);
  // Step 3 of rank 0, for the record: events [1005, 1465) in a 500 us step; COMP 180, COMM 300, ∩
  // 150; busy 347 -> idle 113; peak allocated 5 MiB.
  REQUIRE(m.steps.size() == 2);
  CHECK(m.steps[0].step == 3);
  CHECK_FALSE(m.steps[0].reported);
  CHECK(m.steps[0].step_time_ms == Approx(500 * kUsToMs));  // max(500, 500)
  CHECK(m.steps[0].peak_allocated_bytes == 5 * kMiB);
  // Rank 0: exposed 150 in step 3; rank 1: COMM 150 ∩ COMP 50 -> 100. Mean 125.
  CHECK(m.steps[0].exposed_comm_ms == Approx(125 * kUsToMs));
  CHECK(m.steps[0].idle_ms == Approx((113 + 90) / 2.0 * kUsToMs));
}

TEST_CASE("Kineto import: a single file through load_trace", "[kineto]") {
  const Trace t = load_trace(kFixtures + "kineto_rank1.json");
  CHECK(t.meta.source == Source::kineto);
  REQUIRE(t.ranks.size() == 1);
  CHECK(t.ranks[0].rank == 1);
  CHECK(t.meta.world_size == 2);
}

TEST_CASE("Kineto import: errors name the file and JSON path", "[kineto]") {
  std::string text = read_file(kFixtures + "kineto_rank1.json");
  const size_t at = text.find("\"ts\": 1010.000");
  REQUIRE(at != std::string::npos);
  text.replace(at, 14, "\"ts\": \"soon\"");
  try {
    import_kineto_text(text, "r1.json");
    FAIL("accepted a string ts");
  } catch (const TraceError& e) {
    CHECK(e.kind() == ErrorKind::schema);
    CHECK(e.position() == "/traceEvents/1/ts");
    CHECK(std::string(e.what()).rfind("r1.json: /traceEvents/1/ts", 0) == 0);
  }
  // The same rank twice.
  CHECK_THROWS_AS(import_kineto({kFixtures + "kineto_rank1.json", kFixtures + "kineto_rank1.json"}),
                  TraceError);
  // Not JSON at all, and JSON that is not a trace.
  CHECK_THROWS_AS(import_kineto_text("{\"traceEvents\": [", "cut.json"), TraceError);
  CHECK_THROWS_AS(import_kineto_text("{\"traceEvents\": 3}", "three.json"), TraceError);
  CHECK_THROWS_AS(import_kineto_text("{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", "
                                     "\"name\": \"k\", \"ts\": 31e308, \"dur\": 1}]}"),
                  TraceError);
  // Nothing that can be imported: an error naming what was left out.
  try {
    import_kineto_text(R"({"traceEvents": [{"ph": "X", "cat": "python_function", "name": "f",)"
                       R"( "ts": 1, "dur": 1}]})",
                       "py.json");
    FAIL("imported nothing without an error");
  } catch (const TraceError& e) {
    CHECK(std::string(e.what()).find("nothing to import") != std::string::npos);
    CHECK(std::string(e.what()).find("python_function 1") != std::string::npos);
  }
  CHECK_THROWS_AS(import_kineto_text("{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", "
                                     "\"name\": \"k\", \"ts\": 1e300, \"dur\": 1}]}"),
                  TraceError);
}

TEST_CASE("Kineto import: array form, string ranks, no steps", "[kineto]") {
  // The Chrome "JSON array" form; ranks written as strings.
  const Trace a = import_kineto_text(
      R"([{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1.5,"dur":2.25}])");
  REQUIRE(a.ranks.size() == 1);
  CHECK(a.ranks[0].events.at(0).start_ns == 1500);
  CHECK(a.ranks[0].events.at(0).dur_ns == 2250);
  const Trace b = import_kineto_text(
      R"J({"distributedInfo":{"rank":"3","world_size":"8"},"traceEvents":[)J"
      R"J({"ph":"X","cat":"kernel","name":"ncclDevKernel_Broadcast_RING_LL(x)","pid":0,"tid":9,"ts":0,"dur":1}]})J");
  CHECK(b.ranks.at(0).rank == 3);
  CHECK(b.meta.world_size == 8);
  CHECK(b.ranks[0].events.at(0).category == Category::comm_other);
  CHECK(b.ranks[0].lanes.at(0).kind == LaneKind::comm);
}

TEST_CASE("Kineto fixtures survive export -> checker -> import", "[kineto][chrome]") {
  const Trace t = import_kineto({kFixtures + "kineto_rank0.json", kFixtures + "kineto_rank1.json"});
  const std::string chrome = chrome_trace_string(t);
  const auto issues = check_chrome_trace(chrome);
  INFO(format_chrome_issues(issues));
  CHECK(issues.empty());
  // The combined export (one process per rank) reads back as the same ranks.
  const Trace both = import_kineto_text(chrome, "exported.json");
  REQUIRE(both.ranks.size() == 2);
  for (size_t k = 0; k < 2; ++k) {
    CHECK(both.ranks[k].rank == t.ranks[k].rank);
    CHECK(both.ranks[k].events.size() == t.ranks[k].events.size());
    CHECK(both.ranks[k].steps.size() == t.ranks[k].steps.size());
    CHECK(both.ranks[k].memory.size() == t.ranks[k].memory.size());
    CHECK(both.ranks[k].flows.size() == t.ranks[k].flows.size());  // the launch link of rank 0
  }
  const std::string r0 = chrome_trace_string(t, {0});
  Trace back = import_kineto_text(r0, "r0.json");
  const Metrics a = compute_metrics(t);
  const Metrics b = compute_metrics(back);
  CHECK(b.ranks.at(0).step_time_ms == Approx(a.ranks.at(0).step_time_ms));
  CHECK(b.ranks.at(0).exposed_comm_ms == Approx(a.ranks.at(0).exposed_comm_ms));
  CHECK(b.ranks.at(0).peak_allocated_bytes == a.ranks.at(0).peak_allocated_bytes);
  CHECK(back.ranks.at(0).events.size() == t.ranks.at(0).events.size());
  CHECK(back.ranks.at(0).steps.size() == 2);
}

TEST_CASE("Kineto import: a CPU-only gloo trace gives host ops and host collectives", "[kineto]") {
  // Recorded with torch 2.9.1 on CPU, 2 ranks (bench/torch_reference/gloo_profile.py).
  const Trace t =
      import_kineto({kFixtures + "gloo_cpu_rank0.json", kFixtures + "gloo_cpu_rank1.json"});
  REQUIRE(t.ranks.size() == 2);
  for (const RankTrace& r : t.ranks) {
    CHECK(r.steps.size() == 4);
    CHECK(r.device == -1);
    for (const Lane& l : r.lanes) CHECK(l.kind == LaneKind::host);
    const auto n = count_categories(r);
    CHECK(n.at("comm.all_reduce") == 8);  // gloo:all_reduce, two per step
    CHECK(n.at("host") == 340);           // 332 cpu_op + 20 user_annotation - 4 steps - 8
  }
  const Metrics m = compute_metrics(t);
  // No launch links: the trace's own step markers. Per step, COMM = the union
  // of the gloo:all_reduce ranges (worked out from the file's decimal text):
  // rank 0 steps 1..3 = 25543.095, 11882.430, 7130.055 us -> median 11882.430;
  // rank 1 = 18048.456, 5026.649, 9177.256 -> 9177.256.
  CHECK(m.ranks[0].rule == StepRule::markers);
  CHECK(m.ranks[0].comm_ms == Approx(11.882430));
  CHECK(m.ranks[1].comm_ms == Approx(9.177256));
  CHECK(m.ranks[0].exposed_comm_ms == Approx(11.882430));
  // Nothing ran on a device: those values are not measured, and say so.
  CHECK_FALSE(m.device_measured);
  const nlohmann::json j = metrics_to_json(m);
  CHECK(j["compute_ms"].is_null());
  CHECK(j["idle_ms"].is_null());
  CHECK(j["device_span_ms"].is_null());
  CHECK(j["comm_ms"].get<double>() > 0);
  bool said = false;
  for (const auto& note : j["notes"])
    said = said || note.get<std::string>().find("no device events") != std::string::npos;
  CHECK(said);
}

TEST_CASE("Kineto import: files imported in parallel equal the sequential import", "[kineto]") {
  const std::vector<std::string> files = {kFixtures + "kineto_rank1.json",
                                          kFixtures + "kineto_rank0.json"};
  KinetoImportSummary one, two;
  const Trace sequential = import_kineto(files, &one, 1);
  const Trace parallel = import_kineto(files, &two, 2);
  REQUIRE(parallel.ranks.size() == 2);
  CHECK(parallel.ranks[0].rank == 0);
  CHECK(parallel.meta.world_size == sequential.meta.world_size);
  CHECK(parallel.meta.hardware == sequential.meta.hardware);
  for (size_t k = 0; k < 2; ++k) {
    CHECK(parallel.ranks[k].events.size() == sequential.ranks[k].events.size());
    CHECK(parallel.ranks[k].flows.size() == sequential.ranks[k].flows.size());
    REQUIRE(parallel.ranks[k].steps.size() == sequential.ranks[k].steps.size());
    for (size_t i = 0; i < parallel.ranks[k].steps.size(); ++i)
      CHECK(parallel.ranks[k].steps[i].start_ns == sequential.ranks[k].steps[i].start_ns);
  }
  // Strings are interned in another order; every name and number is the same.
  CHECK(metrics_to_json(compute_metrics(parallel), -1) ==
        metrics_to_json(compute_metrics(sequential), -1));
  CHECK(two.device_events == one.device_events);
  CHECK(two.host_events == one.host_events);
  CHECK(two.launch_links == one.launch_links);
  CHECK(two.memory_records == one.memory_records);
  CHECK(two.skipped == one.skipped);
  // A rank in two files is refused in parallel too, naming the second file.
  try {
    import_kineto({kFixtures + "kineto_rank1.json", kFixtures + "kineto_rank1.json"}, nullptr, 2);
    FAIL("no error");
  } catch (const TraceError& e) {
    CHECK(std::string(e.what()).find("appears in two files") != std::string::npos);
  }
}
