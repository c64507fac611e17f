// The nccl-tests reader (sim/nccl_tests.h): nccl-tests text generated with known
// latency and bandwidth is recovered, real layouts are read, bad files are errors.
#include "tests/sim/calibrate_fixtures.h"

using namespace calibrate_test;

TEST_CASE("nccl-tests text generated from known latency and bandwidth is recovered",
          "[sim][calibrate][nccl]") {
  // Times are printed with 2 decimals in us below 1 ms (then 1, then 0):
  // rounding of up to 5 ns on the small sizes that fix the latency, 5e-5
  // relative on the large ones that fix the bandwidth.
  struct Case {
    std::string kind;
    int hosts, per_host;
    double latency_us, busbw;
  };
  for (const Case& c :
       {Case{"all_gather", 1, 8, 21.5, 370.0}, Case{"reduce_scatter", 1, 8, 24.0, 355.0},
        Case{"all_reduce", 2, 8, 48.0, 190.0}}) {
    INFO(c.kind);
    const std::string text =
        nccl_output(c.kind, c.hosts, c.per_host, c.latency_us, c.busbw, 1024, 1LL << 30);
    const std::vector<sim::NcclTestsTable> tables = sim::parse_nccl_tests(text, c.kind + ".txt");
    REQUIRE(tables.size() == 1);
    CHECK(tables[0].ranks == c.hosts * c.per_host);
    CHECK(tables[0].multi_node() == (c.hosts > 1));
    CHECK(tables[0].rows.size() == 21);
    const sim::CalibrationResult r = sim::calibrate({}, tables, h100_options());
    REQUIRE(r.report.collectives.size() == 1);
    const sim::CollectiveReport& f = r.report.collectives[0];
    CHECK(f.nccl_points == 21);
    CHECK(f.fit.ranks == c.hosts * c.per_host);
    CHECK(f.fit.multi_node == (c.hosts > 1));
    CHECK(std::fabs(static_cast<double>(f.fit.latency_ns) - c.latency_us * 1e3) <= 5.0);
    CHECK(std::fabs(f.fit.bus_bytes_per_s - c.busbw * 1e9) / (c.busbw * 1e9) < 1e-4);
    CHECK(f.max_rel_residual < 5e-4);
  }
}

TEST_CASE("nccl-tests parser reads a realistic all_gather_perf log", "[sim][nccl]") {
  // nccl-tests 2.13 all_gather_perf on 8 H100s of one host, with NCCL INFO
  // lines interleaved. time = 20 us + S (7/8) / 360 GB/s, busbw = algbw x 7/8.
  const std::string text =
      "$ mpirun -np 8 ./build/all_gather_perf -b 1K -e 1G -f 4 -g 1\n"
      "# nccl-tests version 2.13.8 nccl-headers=21903 nccl-library=21903\n"
      "# Collective test starting: all_gather_perf\n"
      "# nThread 1 nGpus 1 minBytes 1024 maxBytes 1073741824 step: 4(factor) warmup iters: 5 "
      "iters: 20 agg iters: 1 validation: 1 graph: 0\n"
      "#\n"
      "# Using devices\n"
      "#  Rank  0 Group  0 Pid  40112 on dgx-h100-01 device  0 [0x18] NVIDIA H100 80GB HBM3\n"
      "#  Rank  1 Group  0 Pid  40113 on dgx-h100-01 device  1 [0x2a] NVIDIA H100 80GB HBM3\n"
      "#  Rank  2 Group  0 Pid  40114 on dgx-h100-01 device  2 [0x3a] NVIDIA H100 80GB HBM3\n"
      "#  Rank  3 Group  0 Pid  40115 on dgx-h100-01 device  3 [0x5d] NVIDIA H100 80GB HBM3\n"
      "#  Rank  4 Group  0 Pid  40116 on dgx-h100-01 device  4 [0x9a] NVIDIA H100 80GB HBM3\n"
      "#  Rank  5 Group  0 Pid  40117 on dgx-h100-01 device  5 [0xab] NVIDIA H100 80GB HBM3\n"
      "#  Rank  6 Group  0 Pid  40118 on dgx-h100-01 device  6 [0xba] NVIDIA H100 80GB HBM3\n"
      "#  Rank  7 Group  0 Pid  40119 on dgx-h100-01 device  7 [0xdb] NVIDIA H100 80GB HBM3\n"
      "dgx-h100-01:40112:40112 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.11<0>\n"
      "dgx-h100-01:40112:40112 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)\n"
      "NCCL version 2.19.3+cuda12.3\n"
      "#\n"
      "#                                                              out-of-place            "
      "           in-place          \n"
      "#       size         count      type   redop    root     time   algbw   busbw #wrong   "
      "  time   algbw   busbw #wrong\n"
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)          "
      "  (us)  (GB/s)  (GB/s)       \n"
      "        1024            32     float    none      -1    20.00    0.05    0.04      0    "
      "19.87    0.05    0.05      0\n"
      "        4096           128     float    none      -1    20.01    0.20    0.18      0    "
      "19.90    0.21    0.18      0\n"
      "       16384           512     float    none      -1    20.04    0.82    0.72      0    "
      "20.01    0.82    0.72      0\n"
      "dgx-h100-01:40115:40160 [3] NCCL INFO comm 0x55d0 rank 3 nranks 8 - Init COMPLETE\n"
      "       65536          2048     float    none      -1    20.16    3.25    2.84      0    "
      "20.10    3.26    2.85      0\n"
      "      262144          8192     float    none      -1    20.64   12.70   11.11      0    "
      "20.55   12.76   11.16      0\n"
      "     1048576         32768     float    none      -1    22.55   46.50   40.69    N/A    "
      "22.47   46.67   40.83    N/A\n"
      "     4194304        131072     float    none      -1    30.19  138.93  121.56    N/A    "
      "30.02  139.72  122.25    N/A\n"
      "    16777216        524288     float    none      -1    60.78  276.03  241.53    N/A    "
      "60.51  277.27  242.61    N/A\n"
      "    67108864       2097152     float    none      -1   183.13  366.46  320.65    N/A   "
      "182.90  366.92  321.05    N/A\n"
      "   268435456       8388608     float    none      -1   672.52  399.15  349.26    N/A   "
      "671.80  399.58  349.63    N/A\n"
      "  1073741824      33554432     float    none      -1   2630.0  408.27  357.23    N/A   "
      "2628.4  408.52  357.46    N/A\n"
      "# Out of bounds values : 0 OK\n"
      "# Avg bus bandwidth    : 116.982 \n"
      "#\n"
      "# Collective test concluded: all_gather_perf\n"
      "#\n";
  const std::vector<sim::NcclTestsTable> tables = sim::parse_nccl_tests(text, "ag.txt");
  REQUIRE(tables.size() == 1);
  const sim::NcclTestsTable& t = tables[0];
  CHECK(t.collective == sim::NcclCollective::all_gather);
  CHECK(t.test == "all_gather_perf");
  CHECK(t.file == "ag.txt");
  CHECK(t.line == 20);
  CHECK(t.ranks == 8);
  CHECK(t.nodes == 1);
  CHECK(t.min_per_node == 8);
  CHECK_FALSE(t.multi_node());
  REQUIRE(t.rows.size() == 11);
  CHECK(t.rows[0].line == 22);
  CHECK(t.rows[0].bytes == 1024);
  CHECK(t.rows[0].count == 32);
  CHECK(t.rows[0].time_us == 20.00);
  CHECK(t.rows[10].bytes == 1073741824);
  CHECK(t.rows[10].time_us == 2630.0);
  CHECK(t.rows[10].algbw_gbps == 408.27);
  CHECK(t.rows[10].busbw_gbps == 357.23);
  // The fit gives back 20 us and 360 GB/s to the printing precision.
  const sim::CalibrationResult r = sim::calibrate({}, tables, h100_options());
  REQUIRE(r.report.collectives.size() == 1);
  const sim::CollectiveReport& f = r.report.collectives[0];
  CHECK(f.fit.kind == plan::OpKind::all_gather);
  CHECK(f.fit.ranks == 8);
  CHECK_FALSE(f.fit.multi_node);
  CHECK(std::llabs(f.fit.latency_ns - 20000) <= 10);
  CHECK(f.fit.bus_bytes_per_s == Approx(360e9).epsilon(1e-3));
}

TEST_CASE("nccl-tests parser reads older and multi-test layouts", "[sim][nccl]") {
  // nccl-tests 2.0-era all_gather: no Group column in rank lines, no
  // redop/root columns, "error" instead of "#wrong"; the kind given by the caller.
  const std::string old_ag =
      "# nThread 1 nGpus 4 minBytes 8 maxBytes 1048576 step: 4(factor) warmup iters: 5 iters: "
      "20 validation: 1\n"
      "#\n"
      "# Using devices\n"
      "#   Rank  0 Pid  31823 on node026 device  0 [0x3d] Tesla V100-SXM2-32GB\n"
      "#   Rank  1 Pid  31823 on node026 device  1 [0x3e] Tesla V100-SXM2-32GB\n"
      "#   Rank  2 Pid  31823 on node026 device  2 [0x3f] Tesla V100-SXM2-32GB\n"
      "#   Rank  3 Pid  31823 on node026 device  3 [0x40] Tesla V100-SXM2-32GB\n"
      "#\n"
      "#                                             out-of-place                       in-place\n"
      "#       size         count    type     time   algbw   busbw  error     time   algbw   "
      "busbw  error\n"
      "#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
      "(GB/s)\n"
      "        4096           256   float    10.75    0.38    0.29  0e+00    10.70    0.38    "
      "0.29  0e+00\n"
      "     1048576         65536   float    24.40   42.97   32.23  0e+00    24.31   43.13   "
      "32.35  0e+00\n";
  CHECK_THROWS_AS(sim::parse_nccl_tests(old_ag, "old.txt"), sim::Error);  // kind unknown
  std::vector<sim::NcclTestsTable> t =
      sim::parse_nccl_tests(old_ag, "old.txt", sim::NcclCollective::all_gather);
  REQUIRE(t.size() == 1);
  CHECK(t[0].collective == sim::NcclCollective::all_gather);
  CHECK(t[0].ranks == 4);
  REQUIRE(t[0].rows.size() == 2);
  CHECK(t[0].rows[1].bytes == 1048576);
  CHECK(t[0].rows[1].time_us == 24.40);
  CHECK(t[0].rows[1].busbw_gbps == 32.23);

  // The binary name on a command line echoed before the test names it.
  t = sim::parse_nccl_tests("$ ./build/reduce_scatter_perf -b 4K -e 1M\n" + old_ag, "rs.txt");
  REQUIRE(t.size() == 1);
  CHECK(t[0].collective == sim::NcclCollective::reduce_scatter);

  // Two tests in one file, over two hosts.
  const std::string two = nccl_output("all_gather", 2, 4, 30, 80, 1 << 20, 1 << 22) +
                          nccl_output("all_reduce", 2, 4, 40, 70, 1 << 20, 1 << 23);
  t = sim::parse_nccl_tests(two, "two.txt");
  REQUIRE(t.size() == 2);
  CHECK(t[0].collective == sim::NcclCollective::all_gather);
  CHECK(t[0].rows.size() == 3);
  CHECK(t[1].collective == sim::NcclCollective::all_reduce);
  CHECK(t[1].rows.size() == 4);
  CHECK(t[1].ranks == 8);
  CHECK(t[1].nodes == 2);
  CHECK(t[1].min_per_node == 4);
  CHECK(t[1].multi_node());
  // A kind given for the file must agree with what the file says.
  CHECK_THAT(
      error_of([&] { sim::parse_nccl_tests(two, "two.txt", sim::NcclCollective::all_gather); }),
      Catch::Contains("two.txt:") && Catch::Contains("all_reduce_perf"));
  sim::NcclCollective k;
  CHECK(sim::parse_nccl_collective("all_reduce_perf_mpi", &k));
  CHECK(k == sim::NcclCollective::all_reduce);
  CHECK_FALSE(sim::parse_nccl_collective("alltoall_perf", &k));
}

TEST_CASE("log lines among nccl-tests rows are ignored, even starting with a digit",
          "[sim][nccl]") {
  const std::string good = nccl_output("all_gather", 1, 2, 10, 100, 1024, 4096);
  const size_t first_row = good.find("        1024");
  REQUIRE(first_row != std::string::npos);
  const std::string logged = good.substr(0, first_row) +
                             "10-0-0-7:4242:4242 [0] NCCL INFO Channel 00/02 : 0 1\n"
                             "2026-11-22 09:50:01 rank 0 ready\n" +
                             good.substr(first_row);
  const std::vector<sim::NcclTestsTable> a = sim::parse_nccl_tests(good, "a.txt");
  const std::vector<sim::NcclTestsTable> b = sim::parse_nccl_tests(logged, "b.txt");
  REQUIRE(a.size() == 1);
  REQUIRE(b.size() == 1);
  REQUIRE(b[0].rows.size() == 3);  // 1024, 2048, 4096
  for (size_t i = 0; i < a[0].rows.size(); ++i) {
    CHECK(b[0].rows[i].bytes == a[0].rows[i].bytes);
    CHECK(b[0].rows[i].time_us == a[0].rows[i].time_us);
  }
}

TEST_CASE("malformed nccl-tests files are errors naming the file and line", "[sim][nccl]") {
  const std::string good = nccl_output("all_gather", 1, 2, 10, 100, 1024, 4096);
  // Line numbers: 7 header lines + 2 rank lines + NCCL version + 4 table header lines.
  const size_t first_row = good.find("        1024");
  REQUIRE(first_row != std::string::npos);
  const size_t row_end = good.find('\n', first_row);
  const std::string row = good.substr(first_row, row_end - first_row);
  int row_line = 1;
  for (size_t i = 0; i < first_row; ++i) row_line += good[i] == '\n';
  auto with_row = [&](const std::string& replacement) {
    return good.substr(0, first_row) + replacement + good.substr(row_end);
  };
  const std::string at = "bad.txt:" + std::to_string(row_line) + ":";

  // Truncated row (the file cut mid-line).
  CHECK_THAT(error_of([&] { sim::parse_nccl_tests(with_row(row.substr(0, 60)), "bad.txt"); }),
             Catch::Contains(at) && Catch::Contains("columns"));
  // Non-numeric time.
  std::string bad_time = row;
  const size_t pos = bad_time.find("10.");
  REQUIRE(pos != std::string::npos);
  bad_time.replace(pos, 5, "1O.xx");
  CHECK_THAT(error_of([&] { sim::parse_nccl_tests(with_row(bad_time), "bad.txt"); }),
             Catch::Contains(at) && Catch::Contains("'time' is not a number"));
  // A time that strtod reads but is no duration: nan, inf, negative.
  for (const char* bad : {"  nan", "  inf", "-1.00"}) {
    std::string odd_time = row;
    odd_time.replace(pos, 5, bad);
    CHECK_THAT(error_of([&] { sim::parse_nccl_tests(with_row(odd_time), "bad.txt"); }),
               Catch::Contains(at) && Catch::Contains("'time' is not a number"));
  }
  // No column header: the first row is the error.
  const size_t header = good.find("#       size");
  REQUIRE(header != std::string::npos);
  const std::string no_header = good.substr(0, header) + good.substr(good.find('\n', header) + 1);
  CHECK_THAT(error_of([&] { sim::parse_nccl_tests(no_header, "bad.txt"); }),
             Catch::Contains("bad.txt:" + std::to_string(row_line - 1) + ":") &&
                 Catch::Contains("before any column header"));
  // No table at all, an empty file.
  CHECK_THAT(error_of([&] { sim::parse_nccl_tests("# nThread 1 nGpus 8\nhello\n", "empty.txt"); }),
             Catch::Contains("empty.txt: no nccl-tests result table"));
  CHECK_THAT(error_of([&] { sim::parse_nccl_tests("", "empty.txt"); }),
             Catch::Contains("empty.txt"));
  // Rank lines: malformed, duplicated (a non-MPI build), missing.
  std::string dup = good;
  const size_t r1 = dup.find("#  Rank  1");
  dup.replace(r1, 10, "#  Rank  0");
  CHECK_THAT(error_of([&] { sim::parse_nccl_tests(dup, "dup.txt"); }),
             Catch::Contains("dup.txt:7:") && Catch::Contains("listed twice"));
  std::string mal = good;
  mal.replace(mal.find("Pid"), 3, "PID");
  CHECK_THAT(error_of([&] { sim::parse_nccl_tests(mal, "mal.txt"); }),
             Catch::Contains("mal.txt:6:") && Catch::Contains("malformed rank line"));
  std::string no_ranks = good;
  for (size_t p; (p = no_ranks.find("#  Rank")) != std::string::npos;)
    no_ranks.erase(p, no_ranks.find('\n', p) + 1 - p);
  CHECK_THAT(error_of([&] { sim::parse_nccl_tests(no_ranks, "nr.txt"); }),
             Catch::Contains("nr.txt:") && Catch::Contains("number of ranks"));
  // A size that does not fit, a negative time.
  CHECK_THAT(error_of([&] {
               sim::parse_nccl_tests(with_row("99999999999999999999" + row.substr(12)), "bad.txt");
             }),
             Catch::Contains(at) && Catch::Contains("'size'"));
  // A missing file.
  CHECK_THAT(error_of([] { sim::load_nccl_tests("/nonexistent/nccl.txt"); }),
             Catch::Contains("/nonexistent/nccl.txt"));
  // Unsupported collectives are kept as "other" and skipped by calibrate.
  std::string a2a = good;
  for (size_t p; (p = a2a.find("all_gather_perf")) != std::string::npos;)
    a2a.replace(p, 15, "alltoall_perf");
  const auto tables = sim::parse_nccl_tests(a2a, "a2a.txt");
  REQUIRE(tables.size() == 1);
  CHECK(tables[0].collective == sim::NcclCollective::other);
  CHECK_THROWS_AS(sim::calibrate({}, tables, h100_options()), sim::Error);  // nothing to fit
}
