// Memory series (range maxima, pixel columns, live buffers) and sweep files.
#include <random>

#include <catch2/catch.hpp>

#include "gui/memory_series.h"
#include "gui/sweep_file.h"

namespace gui = shardscope::gui;
namespace tr = shardscope::traces;

TEST_CASE("max pyramid: range maxima equal brute force on 5,000 random ranges") {
  std::mt19937_64 rng(7);
  std::vector<int64_t> v(40000);
  for (int64_t& x : v) x = static_cast<int64_t>(rng() % 1000000) - 500000;
  gui::MaxPyramid p;
  p.build(v);
  for (int k = 0; k < 5000; ++k) {
    size_t a = rng() % v.size();
    size_t b = rng() % v.size();
    if (a > b) std::swap(a, b);
    ++b;
    const int64_t want = *std::max_element(v.begin() + static_cast<std::ptrdiff_t>(a),
                                           v.begin() + static_cast<std::ptrdiff_t>(b));
    REQUIRE(p.max(a, b) == want);
  }
}

namespace {
constexpr int64_t MiB = 1 << 20;
// Rank 0: +1 MiB params at 100, +4 MiB activations at 250 (peak 5 MiB),
// -4 MiB at 400, +2 MiB grads at 700, free of an unknown address at 900.
tr::Trace memory_trace() {
  tr::Trace t;
  tr::RankTrace& r = t.add_rank(0);
  t.add_lane(r, "compute", tr::LaneKind::compute);
  tr::add_allocation(r, 100, 1 * MiB, 0x1000, 0, tr::MemoryCategory::parameters, 8 * MiB);
  tr::add_allocation(r, 250, 4 * MiB, 0x2000, 0, tr::MemoryCategory::activations, 8 * MiB);
  tr::add_allocation(r, 400, -4 * MiB, 0x2000, 0, tr::MemoryCategory::unknown, 8 * MiB);
  tr::add_allocation(r, 700, 2 * MiB, 0x3000, 0, tr::MemoryCategory::gradients, 8 * MiB);
  tr::add_allocation(r, 900, -1 * MiB, 0, 0, tr::MemoryCategory::gradients, 8 * MiB);
  return t;
}
}  // namespace

TEST_CASE("memory series: the peak, and per-column maxima including the value carried in") {
  const tr::Trace t = memory_trace();
  const gui::MemorySeries s = gui::build_memory_series(t.ranks[0], 100);
  CHECK(s.peak_allocated == 5 * MiB);
  CHECK(s.peak_index == 1);
  CHECK(s.time[1] == 150);  // relative to the origin 100
  // 100 ns per column from relative 0.
  std::vector<gui::MemoryColumn> cols;
  gui::memory_columns(s, gui::TimeView{-100, 100}, 12, 900, cols);
  REQUIRE(cols.size() == 12);
  CHECK_FALSE(cols[0].has);             // [-100, 0): before the first record
  CHECK(cols[1].allocated == 1 * MiB);  // [0, 100): the first record
  CHECK(cols[2].allocated == 5 * MiB);  // [100, 200): the peak at 150
  CHECK(cols[3].allocated == 5 * MiB);  // carried in until the free at 300
  CHECK(cols[4].allocated == 5 * MiB);  // [300, 400): carried in, then freed
  CHECK(cols[5].allocated == 1 * MiB);
  CHECK(cols[7].allocated == 3 * MiB);  // grads at 600
  CHECK(cols[9].allocated == 3 * MiB);  // [800, 900): freed at 800 but carried in
  CHECK(cols[10].allocated == 2 * MiB);
  CHECK_FALSE(cols[11].has);  // after until_ns (900)
  CHECK(cols[2].reserved == 8 * MiB);
}

TEST_CASE("live memory: blocks freed by address leave, categories largest first") {
  const tr::Trace t = memory_trace();
  gui::LiveMemory at_peak = gui::live_memory_at(t.ranks[0], 250);
  CHECK(at_peak.allocated == 5 * MiB);
  REQUIRE(at_peak.categories.size() == 2);
  CHECK(at_peak.categories[0].first == tr::MemoryCategory::activations);
  CHECK(at_peak.categories[0].second == 4 * MiB);
  CHECK(at_peak.categories[1].first == tr::MemoryCategory::parameters);
  REQUIRE(at_peak.blocks.size() == 2);
  CHECK(at_peak.blocks[0].address == 0x2000);
  const gui::LiveMemory later = gui::live_memory_at(t.ranks[0], 800);
  CHECK(later.allocated == 3 * MiB);
  CHECK(later.by_category[static_cast<size_t>(tr::MemoryCategory::activations)] == 0);
  CHECK(later.categories[0].first == tr::MemoryCategory::gradients);
  CHECK(later.live_blocks == 2);
  // A free without an address counts against its own category.
  const gui::LiveMemory end = gui::live_memory_at(t.ranks[0], 1000);
  CHECK(end.by_category[static_cast<size_t>(tr::MemoryCategory::gradients)] == 1 * MiB);
  CHECK(gui::live_memory_at(t.ranks[0], 50).categories.empty());
}

TEST_CASE("sweep file: JSON fields, CSV rows (rejected dropped), errors name the field") {
  nlohmann::json doc = {{"model", "gpt2-tiny"},
                        {"hw", "h100-sxm"},
                        {"memory_limit_bytes", 1000},
                        {"best", 1},
                        {"configs",
                         {{{"world", 2},
                           {"policy", {{"flavor", "fsdp2"}}},
                           {"fits", true},
                           {"pareto", false},
                           {"tokens_per_s", 10.0},
                           {"metrics",
                            {{"step_time_ms", 2.0},
                             {"peak_allocated_bytes", 300},
                             {"peak_reserved_bytes", 400},
                             {"exposed_comm_ms", 0.5},
                             {"overlap", 0.25}}}},
                          {{"world", 2},
                           {"policy", {{"flavor", "fsdp1"}}},
                           {"fits", true},
                           {"pareto", true},
                           {"tokens_per_s", 20.0},
                           {"metrics",
                            {{"step_time_ms", 1.0},
                             {"peak_allocated_bytes", 100},
                             {"peak_reserved_bytes", 200},
                             {"exposed_comm_ms", 0.1},
                             {"overlap", 0.75}}}}}}};
  const gui::SweepFile f = gui::parse_sweep_json(doc, "s.json");
  REQUIRE(f.points.size() == 2);
  CHECK(f.can_simulate());
  CHECK(f.best == 1);
  CHECK(f.points[1].pareto);
  CHECK(f.points[0].peak_reserved_bytes == 400);
  CHECK(f.points[1].policy["flavor"] == "fsdp1");
  CHECK(gui::pareto_order(f) == std::vector<size_t>{1});
  doc["configs"][1]["metrics"].erase("step_time_ms");
  CHECK_THROWS_WITH(gui::parse_sweep_json(doc, "s.json"),
                    Catch::Contains("/configs/1/metrics/step_time_ms"));

  const std::string csv =
      "config,world,\"flavor\",rejected,fits,pareto,tokens_per_step,tokens_per_s,step_time_ms,"
      "peak_allocated_bytes,peak_reserved_bytes,compute_ms,comm_ms,exposed_comm_ms,overlap,"
      "idle_ms,policy\n"
      "0,8,\"fsdp2\",0,1,1,4096,100.0,3.5,10,20,1,1,0.5,0.5,0,\"{\"\"flavor\"\":\"\"fsdp2\"\"}\"\n"
      "1,8,\"fsdp1\",1,0,0,0,0,0,0,0,0,0,0,0,0,\"{\"\"flavor\"\":\"\"fsdp1\"\"}\"\n";
  const gui::SweepFile c = gui::parse_sweep_csv(csv, "s.csv");
  REQUIRE(c.points.size() == 1);
  CHECK_FALSE(c.can_simulate());
  CHECK(c.points[0].step_time_ms == 3.5);
  CHECK(c.points[0].policy["flavor"] == "fsdp2");
  CHECK_THROWS_WITH(gui::parse_sweep_csv("config,world\n", "s.csv"), Catch::Contains("rejected"));
  CHECK_THROWS_WITH(gui::simulate_sweep_point(c, c.points[0]), Catch::Contains("--out FILE.json"));
}

TEST_CASE("sweep file: a configuration that does not fit has no times, only its peaks") {
  // As shardscope sweep writes it: null (JSON) or empty (CSV) times and throughput.
  nlohmann::json doc = {{"model", "gpt2-tiny"},
                        {"hw", "h100-sxm"},
                        {"memory_limit_bytes", 1000},
                        {"best", nullptr},
                        {"configs",
                         {{{"world", 2},
                           {"policy", {{"flavor", "fsdp2"}}},
                           {"fits", false},
                           {"pareto", false},
                           {"tokens_per_step", 128},
                           {"tokens_per_s", nullptr},
                           {"oom_buffer", "grad.fc"},
                           {"metrics",
                            {{"step_time_ms", nullptr},
                             {"peak_allocated_bytes", 900},
                             {"peak_reserved_bytes", 990},
                             {"compute_ms", nullptr},
                             {"comm_ms", nullptr},
                             {"exposed_comm_ms", nullptr},
                             {"overlap", nullptr},
                             {"idle_ms", nullptr}}}}}}};
  gui::SweepFile f = gui::parse_sweep_json(doc, "s.json");
  REQUIRE(f.points.size() == 1);
  CHECK_FALSE(f.points[0].fits);
  CHECK(f.points[0].step_time_ms == 0);
  CHECK(f.points[0].tokens_per_s == 0);
  CHECK(f.points[0].peak_reserved_bytes == 990);
  CHECK(f.points[0].oom_buffer == "grad.fc");
  CHECK(f.best == -1);
  // An older file's numbers there are partial-step times: ignored.
  doc["configs"][0]["metrics"]["step_time_ms"] = 3.0;
  doc["configs"][0]["tokens_per_s"] = 42.0;
  f = gui::parse_sweep_json(doc, "s.json");
  CHECK(f.points[0].step_time_ms == 0);
  CHECK(f.points[0].tokens_per_s == 0);
  // A configuration that fits must have them.
  doc["configs"][0]["fits"] = true;
  doc["configs"][0]["metrics"]["step_time_ms"] = nullptr;
  CHECK_THROWS_WITH(gui::parse_sweep_json(doc, "s.json"),
                    Catch::Contains("/configs/0/metrics/step_time_ms has the wrong type"));

  const std::string csv =
      "config,world,rejected,fits,pareto,tokens_per_step,tokens_per_s,step_time_ms,"
      "peak_allocated_bytes,peak_reserved_bytes,compute_ms,comm_ms,exposed_comm_ms,overlap,"
      "idle_ms,oom_buffer,policy\n"
      "0,8,0,0,0,4096,,,900,990,,,,,,\"grad.fc\",\"{}\"\n"
      "1,8,1,0,0,,,,,,,,,,,,\"{}\"\n";
  const gui::SweepFile c = gui::parse_sweep_csv(csv, "s.csv");
  REQUIRE(c.points.size() == 1);
  CHECK_FALSE(c.points[0].fits);
  CHECK(c.points[0].step_time_ms == 0);
  CHECK(c.points[0].peak_reserved_bytes == 990);
  CHECK(c.points[0].oom_buffer == "grad.fc");
}
