// The trace subcommands end to end: report, export, import, diff, run as the
// built binary (SHARDSCOPE_CLI). Exit 0 on success, 2 with a message naming
// the problem on bad input, and never a partial output file.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/temp_dir.h"
#include "tests/traces/sample_traces.h"
#include "traces/binary_format.h"
#include "traces/chrome_check.h"
#include "traces/file_io.h"
#include "traces/metrics.h"
#include "traces/trace_io.h"

using namespace shardscope::traces;
namespace fs = std::filesystem;

namespace {

struct Run {
  int status = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

Run run(const std::string& args) {
  static int counter = 0;
  const std::string err_path =
      (fs::temp_directory_path() /
       ("shardscope_cli_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)))
          .string();
  const std::string cmd = std::string(SHARDSCOPE_CLI) + " " + args + " 2>" + err_path;
  Run r;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe);
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.err = read_file(err_path);
  fs::remove(err_path);
  return r;
}

// The shared TempDir, with `dir / "name"` giving a path string.
struct TempDir : shardscope::test::TempDir {
  TempDir() : shardscope::test::TempDir("shardscope_cli_traces") {}
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

const std::string kFixtures = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/traces/fixtures/";

}  // namespace

TEST_CASE("cli report: text and contract JSON, from binary and JSON traces", "[cli]") {
  TempDir dir;
  save_trace(testing::sample_trace(), dir / "t.sstrace");
  save_trace(testing::sample_trace(), dir / "t.json");
  Run r = run("report " + (dir / "t.sstrace"));
  CHECK(r.status == 0);
  CHECK(r.out.find("rank 0") != std::string::npos);
  CHECK(r.out.find("by unit") != std::string::npos);
  r = run("report " + (dir / "t.json") + " --json");
  REQUIRE(r.status == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["source"] == "simulator");
  CHECK(j["world_size"] == 2);
  CHECK(j["step_time_ms"].get<double>() == Approx(9000e-6));  // the steps' range
  CHECK(j["ranks"].size() == 2);
  CHECK(j.contains("breakdown"));
  // Kineto files are reported directly.
  r = run("report " + kFixtures + "kineto_rank0.json --json");
  REQUIRE(r.status == 0);
  CHECK(nlohmann::json::parse(r.out)["source"] == "kineto");
  r = run("report --help");
  CHECK(r.status == 0);
  CHECK(r.out.find("usage: shardscope report") != std::string::npos);
}

TEST_CASE("cli report: errors exit 2 naming the file and position", "[cli]") {
  TempDir dir;
  {
    // A rule the trace cannot follow is a --step-rule error (StepRuleError).
    save_trace(testing::sample_trace(), dir / "t.sstrace");
    MetricsOptions launch;
    launch.step_rule = StepRule::launch;
    CHECK_THROWS_AS(compute_metrics(testing::sample_trace(), launch), StepRuleError);
    const Run r = run("report " + (dir / "t.sstrace") + " --step-rule launch");
    CHECK(r.status == 2);
    CHECK(r.err.find("--step-rule: the launch step rule needs launch links") != std::string::npos);
  }
  Run r = run("report " + (dir / "missing.sstrace"));
  CHECK(r.status == 2);
  CHECK(r.err.find("missing.sstrace") != std::string::npos);
  std::string bin = trace_to_binary(testing::sample_trace());
  bin.resize(bin.size() / 2);
  {
    OutputFile f(dir / "cut.sstrace");
    f.write(bin);
    f.commit();
  }
  r = run("report " + (dir / "cut.sstrace"));
  CHECK(r.status == 2);
  CHECK(r.err.find("cut.sstrace: byte ") != std::string::npos);
  {
    OutputFile f(dir / "bad.json");
    f.write(std::string(
        "{\"format\":\"shardscope.trace\",\"version\":1,\"metadata\":{\"source\":\"nope\"}}"));
    f.commit();
  }
  r = run("report " + (dir / "bad.json"));
  CHECK(r.status == 2);
  CHECK(r.err.find("/metadata/source") != std::string::npos);
  CHECK(run("report").status == 2);
  CHECK(run("report a b").status == 2);
  CHECK(run("report --frobnicate x").status == 2);
}

TEST_CASE("cli export: one file, or one per rank, both pass the checker", "[cli]") {
  TempDir dir;
  save_trace(testing::sample_trace(), dir / "t.sstrace");
  Run r = run("export " + (dir / "t.sstrace") + " --chrome " + (dir / "t.chrome.json"));
  REQUIRE(r.status == 0);
  CHECK(check_chrome_trace(read_file(dir / "t.chrome.json")).empty());
  r = run("export " + (dir / "t.sstrace") + " --chrome " + (dir / "per") + " --per-rank");
  REQUIRE(r.status == 0);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string text = read_file(dir / ("per/rank" + std::to_string(rank) + ".json"));
    CHECK(check_chrome_trace(text).empty());
    CHECK(nlohmann::json::parse(text)["distributedInfo"]["rank"] == rank);
  }
  CHECK(run("export " + (dir / "t.sstrace")).status == 2);  // no --chrome
  r = run("export " + (dir / "nope.sstrace") + " --chrome " + (dir / "x.json"));
  CHECK(r.status == 2);
  CHECK_FALSE(fs::exists(dir / "x.json"));
}

TEST_CASE("cli import: Kineto files to a trace that report and diff read", "[cli]") {
  TempDir dir;
  Run r = run("import --kineto " + kFixtures + "kineto_rank0.json " + kFixtures +
              "kineto_rank1.json --out " + (dir / "k.sstrace"));
  REQUIRE(r.status == 0);
  CHECK(r.out.find("2 ranks") != std::string::npos);
  const Trace t = load_trace(dir / "k.sstrace");
  CHECK(t.ranks.size() == 2);
  CHECK(t.meta.source == Source::kineto);
  // Repeated --kineto and a JSON output.
  r = run("import --kineto " + kFixtures + "kineto_rank0.json --kineto " + kFixtures +
          "kineto_rank1.json --out " + (dir / "k.json"));
  REQUIRE(r.status == 0);
  CHECK(load_trace(dir / "k.json") == t);
  // The fixtures link one kernel to its launch (correlation 101): the launch
  // rule applies, and step 3 holds aten::mm [1010.5, 1030.75) us, its
  // cudaLaunchKernel and the GEMM [1020, 1120); its time is its range, 500 us
  // (109.5 us of events); step 4, the last, is dropped.
  r = run("report " + (dir / "k.sstrace") + " --json");
  REQUIRE(r.status == 0);
  nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["step_rule"] == "launch");
  CHECK(j["reported_steps"] == nlohmann::json::array({3}));
  CHECK(j["step_time_ms"].get<double>() == Approx(0.5));  // ProfilerStep#3's range
  // Their own step markers: step 4 of rank 0, [1510, 1860) us.
  r = run("report " + (dir / "k.sstrace") + " --json --step-rule markers");
  REQUIRE(r.status == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j["step_rule"] == "markers");
  CHECK(j["step_time_ms"].get<double>() == Approx(0.5));
  r = run("report " + (dir / "k.sstrace") + " --step-rule sideways");
  CHECK(r.status == 2);
  CHECK(r.err.find("--step-rule") != std::string::npos);
  // Errors: no input, an unreadable input, a broken input. No output file.
  CHECK(run("import --out " + (dir / "x.sstrace")).status == 2);
  CHECK(run("import --kineto " + kFixtures + "kineto_rank0.json").status == 2);
  r = run("import --kineto " + (dir / "none.json") + " --out " + (dir / "x.sstrace"));
  CHECK(r.status == 2);
  CHECK(r.err.find("none.json") != std::string::npos);
  {
    OutputFile f(dir / "broken.json");
    f.write(std::string("{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": 1}]}"));
    f.commit();
  }
  r = run("import --kineto " + (dir / "broken.json") + " --out " + (dir / "x.sstrace"));
  CHECK(r.status == 2);
  CHECK(r.err.find("/traceEvents/0/dur") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "x.sstrace"));
}

TEST_CASE("cli report --ranks: wait and transfer at each collective, the slowest rank", "[cli]") {
  TempDir dir;
  save_trace(testing::sample_trace(), dir / "t.sstrace");
  // Rank 1 is 3 ns behind rank 0 at every collective (sample_trace's skew).
  Run r = run("report " + (dir / "t.sstrace") + " --ranks");
  REQUIRE(r.status == 0);
  CHECK(r.out.find("collectives: 6 matched across ranks") != std::string::npos);
  CHECK(r.out.find("wait ms") != std::string::npos);
  r = run("report " + (dir / "t.sstrace") + " --ranks --json");
  REQUIRE(r.status == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["comm_split"] == true);
  REQUIRE(j["collectives"]["collectives"].size() == 6);
  for (const auto& c : j["collectives"]["collectives"]) {
    CHECK(c["skew_ms"].get<double>() == Approx(3e-6));
    CHECK(c["slowest_rank"] == 1);
  }
}

TEST_CASE("cli diff: deltas in text and JSON, largest first", "[cli]") {
  TempDir dir;
  Trace a = testing::sample_trace();
  Trace b = testing::sample_trace();
  for (RankTrace& r : b.ranks)
    for (Event& e : r.events)
      if (is_comm(e.category)) e.dur_ns *= 2;  // slower communication
  save_trace(a, dir / "a.sstrace");
  save_trace(b, dir / "b.json");
  Run r = run("diff " + (dir / "a.sstrace") + " " + (dir / "b.json"));
  REQUIRE(r.status == 0);
  CHECK(r.out.find("comm_ms") != std::string::npos);
  r = run("diff " + (dir / "a.sstrace") + " " + (dir / "b.json") + " --json");
  REQUIRE(r.status == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  REQUIRE(j["metrics"].size() == 10);
  // COMM per step: [100,1100) [3000,5500) [6000,6300) = 3800 ns becomes
  // [100,2100) [3000,8000) = 7000 ns.
  bool seen = false;
  for (const auto& m : j["metrics"])
    if (m["name"] == "comm_ms") {
      seen = true;
      CHECK(m["relative"].get<double>() == Approx(7000.0 / 3800.0 - 1));
    }
  CHECK(seen);
  double previous = 1e300;
  for (const auto& m : j["metrics"]) {
    const double rel = m["relative"].is_null() ? 0 : std::fabs(m["relative"].get<double>());
    CHECK(rel <= previous);
    previous = rel;
  }
  CHECK(j["by_category"].size() > 0);
  CHECK(j["a"]["path"] == dir / "a.sstrace");
  CHECK(run("diff " + (dir / "a.sstrace")).status == 2);
  CHECK(run("diff " + (dir / "a.sstrace") + " " + (dir / "zzz")).status == 2);
}
