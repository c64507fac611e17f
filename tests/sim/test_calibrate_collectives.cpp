// Calibration of collectives: ring fits across group sizes, timing from the last
// rank's arrival, and protocol changes by size fitted as separate lines.
#include "tests/sim/calibrate_fixtures.h"

using namespace calibrate_test;

TEST_CASE("one-node fits at two group sizes give the ring that predicts a third",
          "[sim][calibrate]") {
  // The truth's analytical ring (no fitted collectives): C = 6000 ns, hop
  // 1500 ns, B = 360 GB/s. Traces over 2 and 8 ranks (one node) fit
  // all-gather / reduce-scatter latencies C + (n-1) hop at n = 2 and 8:
  // two distinct f (n-1), so C, hop and B come back, and a 4-rank group
  // (never traced) costs what the truth says.
  sim::HardwareModel truth = truth_hw();
  truth.collectives.clear();
  std::vector<std::unique_ptr<sim::SimResult>> results;
  std::vector<sim::CalibrationTrace> in;
  for (int world : {2, 8}) {
    const Planned p =
        plan_for({"gpt2-small", {{"wrap", kBlock}, {"batch_size", 1}, {"seq_len", 128}}, world});
    results.push_back(std::make_unique<sim::SimResult>(simulate(p, truth)));
    in.push_back({"world " + std::to_string(world), &results.back()->trace});
  }
  const sim::CalibrationResult r = sim::calibrate(in, {}, h100_options());
  INFO(sim::format_calibration_report(r.report));
  REQUIRE(r.report.ring.fitted);
  CHECK_FALSE(r.report.ring.hop_from_base);
  CHECK(r.report.ring.fits == 4);  // all-gather and reduce-scatter at 2 and 8
  CHECK(std::llabs(r.hw.collective_latency_ns - 6000) <= 2);
  CHECK(std::llabs(r.hw.nvlink_latency_ns - 1500) <= 1);
  CHECK(std::fabs(r.hw.nvlink_bus_bytes_per_s - 360e9) / 360e9 < 1e-4);
  sim::GroupSpan four;
  four.ranks = 4;
  four.nodes = 1;
  four.min_per_node = four.max_per_node = 4;
  REQUIRE(r.hw.collective_fit(plan::OpKind::all_gather, 4, false) == nullptr);
  for (double bytes : {1e5, 1e7, 1e9}) {
    const int64_t want = sim::collective_time(truth, plan::OpKind::all_gather, bytes, four).ns;
    const int64_t got = sim::collective_time(r.hw, plan::OpKind::all_gather, bytes, four).ns;
    INFO(bytes << " B: truth " << want << " ns, fitted " << got << " ns");
    CHECK(std::llabs(got - want) <= 3 + want / 10000);
  }
  CHECK_THAT(sim::format_calibration_report(r.report),
             Catch::Contains("one-node ring for other group sizes") &&
                 Catch::Contains("from 4 fit(s): B 360.00 GB/s"));
}

TEST_CASE("collectives are timed from the last rank's arrival when every rank is in the trace",
          "[sim][calibrate]") {
  // Two ranks, eight all-gathers of 1 MB and 4 MB alternating; rank 1
  // arrives 3000 ns after rank 0 each time, and both end at rank 1's start
  // + 5000 + x / 1e11 B/s (x = S/2): 10,000 and 25,000 ns. Rank 0's own
  // durations include the 3000 ns wait; from the last arrival the fit is
  // exactly 5000 ns and 100 GB/s.
  const auto build = [](bool both_ranks) {
    traces::Trace t;
    t.meta.source = traces::Source::engine_cpu;
    t.meta.world_size = 2;
    for (int rank = 0; rank < (both_ranks ? 2 : 1); ++rank) {
      traces::RankTrace& r = t.add_rank(rank);
      const uint32_t comm = t.add_lane(r, "all-gather", traces::LaneKind::comm);
      for (int i = 0; i < 8; ++i) {
        const int64_t bytes = i % 2 ? 4000000 : 1000000;
        const int64_t late = 100000 * i + 3000;
        const int64_t end = late + 5000 + bytes / 2 / 100;
        const int64_t start = rank == 0 ? 100000 * i : late;
        traces::Event& e = traces::add_event(r, comm, t.intern("all_gather"),
                                             traces::Category::comm_all_gather, start, end - start);
        e.bytes = static_cast<uint64_t>(bytes);
      }
    }
    return t;
  };
  sim::CalibrationOptions o;
  o.base = sim::hardware_preset("cpu-local");
  o.group_size = 2;
  const traces::Trace both = build(true);
  const sim::CalibrationResult r = sim::calibrate({{"both", &both}}, {}, o);
  INFO(sim::format_calibration_report(r.report));
  CHECK(r.report.collectives_matched == 8);
  REQUIRE(r.report.collectives.size() == 1);
  CHECK(r.report.collectives[0].fit.latency_ns == 5000);
  CHECK(std::fabs(r.report.collectives[0].fit.bus_bytes_per_s - 1e11) / 1e11 < 1e-9);
  CHECK(r.report.collectives[0].max_rel_residual < 1e-9);
  // Rank 0 alone: nothing to match, its own durations (3000 ns more each).
  const traces::Trace one = build(false);
  const sim::CalibrationResult solo = sim::calibrate({{"one", &one}}, {}, o);
  CHECK(solo.report.collectives_matched == 0);
  REQUIRE(solo.report.collectives.size() == 1);
  CHECK(solo.report.collectives[0].fit.latency_ns == 8000);
}

TEST_CASE("a protocol change by size is fitted as two lines", "[sim][calibrate][nccl]") {
  // 8-rank all-gather: 1 KiB .. 1 MiB at 12 us + 150 GB/s (LL-like), 2 MiB
  // .. 1 GiB at 60 us + 370 GB/s. One line leaves tens of percent; two lines
  // split at 1 MiB give both back (times printed to 2 decimals in us).
  std::vector<sim::NcclTestsTable> tables =
      sim::parse_nccl_tests(nccl_output("all_gather", 1, 8, 12.0, 150.0, 1024, 1 << 20), "a.txt");
  for (sim::NcclTestsTable& t : sim::parse_nccl_tests(
           nccl_output("all_gather", 1, 8, 60.0, 370.0, 2 << 20, 1 << 30), "b.txt"))
    tables.push_back(std::move(t));
  REQUIRE(tables.size() == 2);
  const sim::CalibrationResult r = sim::calibrate({}, tables, h100_options());
  INFO(sim::format_calibration_report(r.report));
  REQUIRE(r.report.collectives.size() == 1);
  const sim::CollectiveFit& f = r.report.collectives[0].fit;
  CHECK(f.small_max_bytes == 1 << 20);
  CHECK(std::llabs(f.small_latency_ns - 12000) <= 10);
  CHECK(std::fabs(f.small_bus_bytes_per_s - 150e9) / 150e9 < 1e-3);
  CHECK(std::llabs(f.latency_ns - 60000) <= 10);
  CHECK(std::fabs(f.bus_bytes_per_s - 370e9) / 370e9 < 1e-3);
  CHECK(r.report.collectives[0].max_rel_residual < 1e-3);
  CHECK_THAT(sim::format_calibration_report(r.report),
             Catch::Contains("two lines (protocol change by size) at 1048576 B") &&
                 Catch::Contains("<= 1048576 B"));
  // The model written and read back keeps both lines.
  const sim::HardwareModel back =
      sim::hardware_from_json(sim::calibrated_hardware_json(r.hw, "h100-sxm"), "fit.json");
  const sim::CollectiveFit* b = back.collective_fit(plan::OpKind::all_gather, 8, false);
  REQUIRE(b != nullptr);
  CHECK(b->small_max_bytes == f.small_max_bytes);
  CHECK(b->small_bus_bytes_per_s == f.small_bus_bytes_per_s);
  // One regime only (the first table): one line, no split.
  const sim::CalibrationResult one = sim::calibrate({}, {tables[0]}, h100_options());
  CHECK(one.report.collectives[0].fit.small_max_bytes == 0);
}
