// Calibration (sim/calibrate.h): recovery of known figures from traces
// simulated with them, the JSON round trip, bad input, the CLI. The nccl-tests
// reader is in test_nccl_tests.cpp, collective fits in
// test_calibrate_collectives.cpp; their shared fixtures in calibrate_fixtures.h.
#include "tests/sim/calibrate_fixtures.h"

using namespace calibrate_test;

TEST_CASE(
    "calibration recovers efficiencies, contention and collective figures from simulated "
    "traces",
    "[sim][calibrate]") {
  const Synthetic& syn = synthetic();
  const sim::HardwareModel truth = truth_hw();
  const sim::CalibrationResult r = sim::calibrate(syn.inputs(), {}, h100_options());
  const sim::CalibrationReport& rep = r.report;
  INFO(sim::format_calibration_report(rep));

  // Durations are rounded to whole ns; efficiency is a least-squares fit of
  // d = a / eff whose error is at most 0.5 ns / (a-weighted mean duration),
  // far below 1e-5 for these microsecond ops: 1e-5 relative is the tolerance.
  // One fit per (op type, dtype): the scenarios run bf16 and fp32, and the
  // truth's efficiency is the same for both, so each dtype recovers it.
  for (const auto& want : {std::pair<std::string, double>{"linear", 0.55}, {"attention", 0.35}}) {
    const std::string& type = want.first;
    const double eff = want.second;
    INFO(type);
    int64_t events = 0;
    // One entry per (key, dtype): forward ops under the type, backward ops
    // under "type.backward" (the simulator's " bwd" names), each recovering
    // the truth's single efficiency.
    std::set<std::pair<std::string, plan::DType>> keys;
    std::set<plan::DType> dtypes;
    for (const sim::EfficiencyReport& e : rep.efficiency) {
      if (e.op_type != type && e.op_type != type + ".backward") continue;
      INFO(e.op_type << " " << plan::dtype_name(e.dtype));
      CHECK(e.fitted);
      CHECK(keys.insert({e.op_type, e.dtype}).second);
      dtypes.insert(e.dtype);
      events += e.events;
      // The whole-ns rounding bound is 0.5 ns over the a-weighted mean
      // duration: bf16 attention has 3 short compute-bound events (2.5e-5).
      CHECK(std::fabs(e.efficiency - eff) / eff < (e.events >= 40 ? 1e-5 : 1e-4));
      CHECK(r.hw.efficiency_of(e.op_type, e.dtype) == e.efficiency);
      CHECK(r.hw.dtype_efficiency.at(e.dtype).at(e.op_type) == e.efficiency);
      CHECK(e.max_rel_residual < 1e-3);  // one ns on the shortest used event
    }
    CHECK(dtypes == std::set<plan::DType>{plan::DType::f32, plan::DType::bf16});
    CHECK(keys.size() == 4);  // forward and backward, fp32 and bf16
    // Enough uncontended compute-bound events to fit from (46 attention,
    // 293 linear, on these scenarios since fsdp2's copy-in waits for
    // the copy-out: more compute overlaps all-gathers).
    CHECK(events > 40);
    // The dtype-independent map is the base's: a fit says nothing about a
    // dtype it did not see (f16 here).
    CHECK(r.hw.efficiency_of(type) == sim::hardware_preset("h100-sxm").efficiency_of(type));
    CHECK(r.hw.efficiency_of(type, plan::DType::f16) ==
          sim::hardware_preset("h100-sxm").efficiency_of(type));
  }
  // Memory-bound types keep the base's value (1.0 for layernorm, gelu ...).
  for (const sim::EfficiencyReport& e : rep.efficiency) {
    if (e.fitted) continue;
    CHECK(e.efficiency == e.base_efficiency);
    CHECK(r.hw.efficiency_of(e.op_type, e.dtype) ==
          sim::hardware_preset("h100-sxm").efficiency_of(e.op_type));
  }

  // Contention: d = llround(llround(p) x 1.25); the fit sees p up to the
  // efficiency error: 1e-5 relative.
  CHECK(rep.contention.fitted);
  CHECK(rep.contention.events > 20);
  CHECK(std::fabs(r.hw.contention_factor - 1.25) / 1.25 < 1e-5);

  // Collectives: t = latency + llround(x / bw): latency within 1 ns, bus
  // bandwidth within 1e-5 relative (whole-ns rounding over transfers of
  // 0.1-1 ms, weighted 1/t^2 towards the small ones).
  struct Expect {
    plan::OpKind kind;
    std::vector<int> group;
  };
  const std::vector<Expect> expect = {
      {plan::OpKind::all_gather, range(0, 2)},      // explicit fit of the truth
      {plan::OpKind::reduce_scatter, range(0, 2)},  // explicit fit
      {plan::OpKind::all_gather, range(0, 4)},      // ring closed form, one node
      {plan::OpKind::reduce_scatter, range(0, 4)},
      {plan::OpKind::all_gather, range(0, 8)},
      {plan::OpKind::reduce_scatter, range(0, 8)},
      {plan::OpKind::all_gather, range(0, 16)},  // two nodes: min(NVLink, 8 x IB)
      {plan::OpKind::reduce_scatter, range(0, 16)},
      {plan::OpKind::all_reduce, range(0, 2, 8)},  // hybrid: ranks {0, 8}, explicit fit
      {plan::OpKind::all_reduce, range(0, 4)},     // DDP on one node
  };
  double worst_latency_ns = 0, worst_bw = 0;
  for (const Expect& e : expect) {
    const sim::GroupSpan span = sim::group_span(e.group, 8);
    const sim::CollectiveFit want = expected_fit(truth, e.kind, span);
    INFO(plan::op_kind_name(e.kind)
         << " over " << span.ranks << " ranks, " << span.nodes << " node(s)");
    const sim::CollectiveReport* got = find_fit(rep, e.kind, span.ranks, span.nodes > 1);
    REQUIRE(got != nullptr);
    CHECK(got->distinct_sizes >= 2);
    CHECK_FALSE(got->latency_from_base);
    CHECK(std::llabs(got->fit.latency_ns - want.latency_ns) <= 1);
    CHECK(std::fabs(got->fit.bus_bytes_per_s - want.bus_bytes_per_s) / want.bus_bytes_per_s < 1e-5);
    CHECK(got->max_rel_residual < 1e-4);
    const sim::CollectiveFit* in_hw = r.hw.collective_fit(e.kind, span.ranks, span.nodes > 1);
    REQUIRE(in_hw != nullptr);
    CHECK(in_hw->latency_ns == got->fit.latency_ns);
    worst_latency_ns = std::max(
        worst_latency_ns, std::fabs(static_cast<double>(got->fit.latency_ns - want.latency_ns)));
    worst_bw = std::max(worst_bw, std::fabs(got->fit.bus_bytes_per_s - want.bus_bytes_per_s) /
                                      want.bus_bytes_per_s);
  }
  CHECK(rep.collectives.size() == expect.size());
  WARN("recovery: worst latency error " << worst_latency_ns << " ns, worst bus bw rel error "
                                        << worst_bw);
}

TEST_CASE("the written hardware JSON round-trips and reproduces the source durations",
          "[sim][calibrate]") {
  const Synthetic& syn = synthetic();
  const sim::CalibrationResult r = sim::calibrate(syn.inputs(), {}, h100_options());
  test::TempDir dir;
  const std::string path =
      dir.write("fitted.json", sim::calibrated_hardware_json(r.hw, "h100-sxm"));
  const sim::HardwareModel back = sim::load_hardware(path);
  CHECK(back.name == "fitted");
  CHECK(sim::hardware_to_json(back) == sim::hardware_to_json(r.hw));
  CHECK(back.efficiency == r.hw.efficiency);
  CHECK(back.collectives.size() == r.hw.collectives.size());

  // Every op of every scenario lasts as long on the fitted model as on the
  // truth up to rounding: a collective's fitted latency is within 1 ns and its
  // transfer time within 1 ns, so no op is more than 2 ns off.
  size_t ops = 0, exact = 0;
  long long worst = 0;
  for (size_t i = 0; i < syn.planned.size(); ++i) {
    const sim::SimResult again = simulate(syn.planned[i], back);
    const sim::SimResult& source = syn.results[i];
    REQUIRE(again.op_start.size() == source.op_start.size());
    for (size_t op = 0; op < source.op_start.size(); ++op) {
      const int64_t a = (source.op_end[op] - source.op_start[op]).ns;
      const int64_t b = (again.op_end[op] - again.op_start[op]).ns;
      ++ops;
      if (a == b) ++exact;
      worst = std::max(worst, std::llabs(static_cast<long long>(a - b)));
    }
    CHECK(std::llabs(again.step_time.ns - source.step_time.ns) <= 1 + source.step_time.ns / 100000);
  }
  INFO(exact << " of " << ops << " op durations identical");
  CHECK(worst <= 2);
  // Forward and backward ops fit separate efficiencies (half the events
  // each), so a few more durations land on the other side of a rounding.
  CHECK(static_cast<double>(exact) >= 0.98 * static_cast<double>(ops));
}

TEST_CASE("a base with fewer op types still round-trips exactly", "[sim][calibrate]") {
  sim::HardwareModel hw = sim::hardware_preset("cpu-local");
  hw.efficiency["linear"] = 0.42;
  const json doc = sim::calibrated_hardware_json(hw);
  CHECK(doc["base"] == "cpu-local");
  const sim::HardwareModel back = sim::hardware_from_json(doc, "x");
  CHECK(back.efficiency == hw.efficiency);
  sim::HardwareModel bare = hw;
  bare.efficiency = {{"linear", 0.42}};  // no "default": stated explicitly as 1
  const sim::HardwareModel back2 =
      sim::hardware_from_json(sim::calibrated_hardware_json(bare), "y");
  CHECK(back2.efficiency_of("linear") == 0.42);
  CHECK(back2.efficiency_of("anything") == 1.0);
}

TEST_CASE("one message size keeps the base latency and fits the bandwidth", "[sim][calibrate]") {
  // No wrapping: one unit, so every all-gather moves the same buffer.
  Planned p = plan_for({"gpt2-small", {{"batch_size", 1}, {"seq_len", 256}}, 2});
  const sim::HardwareModel truth = truth_hw();
  const sim::SimResult res = simulate(p, truth);
  const sim::CalibrationResult r = sim::calibrate({{"one-unit", &res.trace}}, {}, h100_options());
  const sim::CollectiveReport* ag = find_fit(r.report, plan::OpKind::all_gather, 2, false);
  REQUIRE(ag != nullptr);
  CHECK(ag->distinct_sizes == 1);
  CHECK(ag->latency_from_base);
  // The base (H100 preset, 2 ranks on NVLink): 5000 + 1 x 1000 ns.
  CHECK(ag->fit.latency_ns == 6000);
  // t = 9000 + x / 200e9 measured; fitted with latency 6000: bw = x / (t - 6000 ns).
  int64_t bytes = 0, dur = 0;
  for (const traces::Event& e : res.trace.ranks[0].events)
    if (e.category == traces::Category::comm_all_gather) {
      bytes = static_cast<int64_t>(e.bytes);
      dur = e.dur_ns;
    }
  REQUIRE(bytes > 0);
  const double expected_bw = static_cast<double>(bytes) * 0.5 / ((dur - 6000) * 1e-9);
  CHECK(ag->fit.bus_bytes_per_s == Approx(expected_bw).epsilon(1e-9));
  bool noted = false;
  for (const std::string& n : r.report.notes)
    noted = noted || n.find("cannot separate latency from bandwidth") != std::string::npos;
  CHECK(noted);
}

TEST_CASE("bad calibration inputs are errors naming the trace", "[sim][calibrate]") {
  // A trace file that does not exist.
  CHECK_THAT(error_of([] { sim::load_calibration_trace("/nonexistent/run.sstrace"); }),
             Catch::Contains("/nonexistent/run.sstrace"));
  // A trace with neither compute events with FLOPs nor collectives.
  traces::Trace empty;
  traces::RankTrace& rk = empty.add_rank(0);
  const uint32_t lane = empty.add_lane(rk, "copy", traces::LaneKind::copy);
  traces::add_event(rk, lane, empty.intern("h2d"), traces::Category::memcpy_h2d, 0, 1000);
  const uint32_t compute = empty.add_lane(rk, "compute", traces::LaneKind::compute);
  traces::add_event(rk, compute, empty.intern("kernel"), traces::Category::compute, 0, 1000);
  CHECK_THAT(error_of([&] {
               sim::calibrate({{"empty.sstrace", &empty}}, {}, h100_options());
             }),
             Catch::Contains("empty.sstrace") && Catch::Contains("nothing to calibrate"));

  // Collectives without a policy in the metadata: the group is unknown...
  traces::Trace bare = synthetic().results[0].trace;
  bare.meta.policy_json.clear();
  CHECK_THAT(error_of([&] {
               sim::calibrate({{"bare.sstrace", &bare}}, {}, h100_options());
             }),
             Catch::Contains("bare.sstrace") && Catch::Contains("--group-size"));
  // ... unless given.
  sim::CalibrationOptions o = h100_options();
  o.group_size = 2;
  const sim::CalibrationResult r = sim::calibrate({{"bare.sstrace", &bare}}, {}, o);
  CHECK(find_fit(r.report, plan::OpKind::all_gather, 2, false) != nullptr);

  // --group-size follows plan/'s layout: on the hybrid trace (16 ranks, shard
  // groups of 8) without its policy, group size 8 puts the all-reduces over
  // {r, r + 8} (two nodes), exactly as the policy does.
  traces::Trace hybrid = synthetic().results[4].trace;
  o.group_size = 0;
  const sim::CalibrationResult with_policy = sim::calibrate({{"h.sstrace", &hybrid}}, {}, o);
  hybrid.meta.policy_json.clear();
  o.group_size = 8;
  const sim::CalibrationResult forced = sim::calibrate({{"h.sstrace", &hybrid}}, {}, o);
  const sim::CollectiveReport* ar = find_fit(forced.report, plan::OpKind::all_reduce, 2, true);
  REQUIRE(ar != nullptr);
  CHECK(ar->fit.latency_ns == 25000);
  CHECK(find_fit(forced.report, plan::OpKind::all_reduce, 8, false) == nullptr);
  CHECK(sim::hardware_to_json(forced.hw) == sim::hardware_to_json(with_policy.hw));
  // A group size the trace's world is no multiple of cannot place the all-reduces.
  o.group_size = 6;
  CHECK_THAT(error_of([&] {
               sim::calibrate({{"h.sstrace", &hybrid}}, {}, o);
             }),
             Catch::Contains("h.sstrace") && Catch::Contains("--group-size 6"));

  // reshard_after_forward=2 with 4-rank shard groups mixes group sizes.
  Planned p = plan_for({"gpt2-tiny", {{"wrap", kBlock}, {"reshard_after_forward", 2}}, 4});
  const sim::SimResult res = simulate(p, truth_hw());
  CHECK_THAT(error_of([&] {
               sim::calibrate({{"rs2.sstrace", &res.trace}}, {}, h100_options());
             }),
             Catch::Contains("rs2.sstrace") && Catch::Contains("reshard_after_forward=2"));

  // A policy that does not parse.
  traces::Trace badpol = synthetic().results[0].trace;
  badpol.meta.policy_json = "{\"flavor\": \"fsdp9\"}";
  CHECK_THAT(error_of([&] {
               sim::calibrate({{"pol.sstrace", &badpol}}, {}, h100_options());
             }),
             Catch::Contains("pol.sstrace"));
  CHECK_THROWS_AS(sim::calibrate({}, {}, h100_options()), sim::Error);
}

TEST_CASE("calibrate CLI writes a hardware JSON that simulate takes", "[sim][calibrate][cli]") {
  test::TempDir dir;
  const std::string trace = (dir.path / "run.sstrace").string();
  traces::save_trace(synthetic().results[0].trace, trace);
  const std::string nccl = (dir.path / "ag.txt").string();
  std::ofstream(nccl) << nccl_output("all_gather", 1, 8, 20, 360, 1024, 1 << 24);
  const std::string out = (dir.path / "hw.json").string();

  auto r = test::run_cli("calibrate " + trace + " --nccl-tests all_gather=" + nccl + " --out " +
                         out + " --json");
  REQUIRE(r.status == 0);
  const json j = json::parse(r.output);
  CHECK(j["name"] == "hw");
  CHECK(j["out"] == out);
  CHECK(j["collectives"].size() >= 3);
  CHECK(j["contention"]["fitted"] == true);
  const sim::HardwareModel hw = sim::load_hardware(out);
  CHECK(hw.name == "hw");
  CHECK(hw.efficiency_of("linear", plan::DType::f32) == Approx(0.55).epsilon(1e-4));
  CHECK(hw.efficiency_of("linear") == sim::hardware_preset("h100-sxm").efficiency_of("linear"));
  const sim::CollectiveFit* ag8 = hw.collective_fit(plan::OpKind::all_gather, 8, false);
  REQUIRE(ag8 != nullptr);
  CHECK(ag8->bus_bytes_per_s == Approx(360e9).epsilon(1e-3));

  auto text = test::run_cli("calibrate " + trace + " --out " + out);
  CHECK(text.status == 0);
  CHECK_THAT(text.output, Catch::Contains("compute efficiency") && Catch::Contains("linear") &&
                              Catch::Contains("contention factor 1.25"));
  auto sim_run = test::run_cli("simulate --model gpt2-small --world 2 --hw " + out + " --json");
  CHECK(sim_run.status == 0);

  // Errors: status 2 with a message.
  auto no_out = test::run_cli("calibrate " + trace);
  CHECK(no_out.status == 2);
  CHECK_THAT(no_out.output, Catch::Contains("--out"));
  auto missing = test::run_cli("calibrate /nonexistent/x.sstrace --out " + out);
  CHECK(missing.status == 2);
  CHECK_THAT(missing.output, Catch::Contains("/nonexistent/x.sstrace"));
  CHECK(test::run_cli("calibrate --out " + out).status == 2);
  CHECK(test::run_cli("calibrate " + trace + " --out " + out + " --dtype int8").status == 2);
  CHECK(test::run_cli("calibrate " + trace + " --out " + out + " --base tpu").status == 2);
  std::ofstream(dir.path / "bad.txt") << "# Collective test starting: all_gather_perf\n12 x\n";
  auto bad =
      test::run_cli("calibrate --nccl-tests " + (dir.path / "bad.txt").string() + " --out " + out);
  CHECK(bad.status == 2);
  CHECK_THAT(bad.output, Catch::Contains("bad.txt:2:"));
}

TEST_CASE("calibration recovers a size-dependent linear efficiency as a curve",
          "[sim][calibrate]") {
  // Truth: linear efficiency rising with size, 0.3 at 1e8 FLOPs to 0.7 at
  // 1e10 (log-linear); gpt2-small at B = 1, T = 512 on 2 ranks has linear
  // ops of 0.8 to 81 GFLOP, forward and backward.
  sim::HardwareModel truth = truth_hw();
  truth.efficiency_curves[plan::DType::f32]["linear"] = {{1e8, 0.3}, {1e10, 0.7}};
  Planned p = plan_for(scenarios()[0]);
  const sim::SimResult res = simulate(p, truth);
  const sim::CalibrationResult r = sim::calibrate({{"curve", &res.trace}}, {}, h100_options());
  const auto it =
      std::find_if(r.report.efficiency.begin(), r.report.efficiency.end(),
                   [](const sim::EfficiencyReport& e) { return e.op_type == "linear"; });
  REQUIRE(it != r.report.efficiency.end());
  INFO(sim::format_calibration_report(r.report));
  REQUIRE(it->curve.size() >= 2);
  CHECK(r.hw.efficiency_curves.at(plan::DType::f32).at("linear").size() == it->curve.size());
  // Each knot: the bin's least-squares efficiency at its geometric-mean
  // FLOPs, within 2% of the truth there (bins mix sizes up to 2x apart).
  for (const sim::EfficiencyKnot& k : it->curve) {
    INFO(k.flops << " FLOPs: " << k.efficiency);
    const double want = truth.efficiency_of("linear", plan::DType::f32, k.flops);
    CHECK(std::fabs(k.efficiency - want) / want < 0.02);
  }
  // The scalar fit alone is off on linear's uncontended events by far more
  // than the curve's residuals.
  CHECK(it->rms_rel_residual < 0.02);
  double scalar_rms = 0;
  int64_t n = 0;
  for (const traces::Event& e : res.trace.ranks[0].events) {
    if (e.category != traces::Category::compute || e.flops == 0) continue;
    if (res.trace.str(e.op) != "linear") continue;
    const double predicted =
        static_cast<double>(e.flops) / (r.hw.peak_flops(plan::DType::f32) * it->efficiency) * 1e9;
    const double rel = (predicted - static_cast<double>(e.dur_ns)) / static_cast<double>(e.dur_ns);
    scalar_rms += rel * rel;
    ++n;
  }
  REQUIRE(n > 0);
  CHECK(std::sqrt(scalar_rms / static_cast<double>(n)) > 5 * it->rms_rel_residual);
}

TEST_CASE("calibration recovers the cost of ops without FLOPs", "[sim][calibrate]") {
  // Truth: grad_cast costs 20 us + bytes at 40% of HBM bandwidth; copy_out
  // 10% of it with no fixed part. Two scenarios (gpt2-small fp32 on 2 ranks,
  // bf16 on 4): uncontended grad_casts of several sizes.
  sim::HardwareModel truth = truth_hw();
  truth.memory_ops["grad_cast"] = {20000, 0.4};
  truth.memory_ops["copy_out"] = {0, 0.1};
  const Planned p0 = plan_for(scenarios()[0]), p1 = plan_for(scenarios()[1]);
  const sim::SimResult r0 = simulate(p0, truth), r1 = simulate(p1, truth);
  const sim::CalibrationResult r =
      sim::calibrate({{"fp32", &r0.trace}, {"bf16", &r1.trace}}, {}, h100_options());
  INFO(sim::format_calibration_report(r.report));
  const auto find = [&](const std::string& kind) -> const sim::MemoryOpReport& {
    const auto it = std::find_if(r.report.memory_ops.begin(), r.report.memory_ops.end(),
                                 [&](const sim::MemoryOpReport& m) { return m.kind == kind; });
    REQUIRE(it != r.report.memory_ops.end());
    return *it;
  };
  const sim::MemoryOpReport& cast = find("grad_cast");
  CHECK(cast.distinct_sizes >= 2);
  CHECK(cast.events > 0);
  CHECK_FALSE(cast.fixed_from_zero);
  CHECK(std::llabs(cast.fit.fixed_ns - 20000) <= 2);  // whole-ns rounding
  CHECK(cast.fit.bandwidth_efficiency == Approx(0.4).epsilon(1e-5));
  CHECK(r.hw.memory_ops.at("grad_cast").fixed_ns == cast.fit.fixed_ns);
  CHECK(cast.max_rel_residual < 1e-4);
  const sim::MemoryOpReport& copy = find("copy_out");
  CHECK(copy.fit.bandwidth_efficiency == Approx(0.1).epsilon(1e-4));
  CHECK(copy.fit.fixed_ns <= 2);
  // Kinds the truth leaves at bytes / HBM bw come back at efficiency 1.
  for (const sim::MemoryOpReport& m : r.report.memory_ops) {
    if (m.kind == "grad_cast" || m.kind == "copy_out") continue;
    INFO(m.kind);
    CHECK(m.fit.bandwidth_efficiency == Approx(1.0).epsilon(1e-3));
    CHECK(m.fit.fixed_ns <= 2);
  }
}

TEST_CASE("a fitted name that is not a graph op type is reported, not written",
          "[sim][calibrate]") {
  // The synthetic scenario's attention events renamed as a kernel would be:
  // fitted and reported, absent from the model, which keeps the base's.
  Planned p = plan_for(scenarios()[0]);
  sim::SimResult res = simulate(p, truth_hw());
  traces::Trace& t = res.trace;
  const uint32_t kernel = t.intern("flash_fwd_kernel");
  for (traces::RankTrace& r : t.ranks)
    for (traces::Event& e : r.events)
      if (e.op != traces::kNoString && t.str(e.op) == "attention") e.op = kernel;
  const sim::CalibrationResult r = sim::calibrate({{"renamed", &t}}, {}, h100_options());
  const auto it =
      std::find_if(r.report.efficiency.begin(), r.report.efficiency.end(),
                   [](const sim::EfficiencyReport& e) { return e.op_type == "flash_fwd_kernel"; });
  REQUIRE(it != r.report.efficiency.end());
  CHECK(it->fitted);
  CHECK_FALSE(it->written);
  CHECK(std::fabs(it->efficiency - 0.35) / 0.35 < 1e-4);
  for (const auto& [dtype, map] : r.hw.dtype_efficiency) CHECK(map.count("flash_fwd_kernel") == 0);
  CHECK(r.hw.efficiency_of("attention", plan::DType::f32) ==
        sim::hardware_preset("h100-sxm").efficiency_of("attention"));
  bool noted = false;
  for (const std::string& n : r.report.notes)
    noted = noted || n.find("not graph op types (e.g. 'flash_fwd_kernel')") != std::string::npos;
  CHECK(noted);
  // The written model loads (simulate --hw): no key but graph op types.
  CHECK_NOTHROW(sim::hardware_from_json(sim::calibrated_hardware_json(r.hw), "fit.json"));
}

TEST_CASE("op dispatch is the mean gap between device ops that were ready", "[sim][calibrate]") {
  // One rank, a host lane launching five linear ops (correlation 1..5) on a
  // compute lane and one all-gather on a comm lane. Gaps on the compute lane:
  //   op1 [0, 1000) -> op2 at 1040: launched at 100 (ready), nothing else
  //     ended in (1000, 1040]: a 40 ns gap;
  //   op2 [1040, 2040) -> op3 at 2100: a 60 ns gap;
  //   op3 [2100, 3100) -> op4 at 3600: the all-gather ended at 3500, inside
  //     the gap (op4 may have waited for it): not used;
  //   op4 [3600, 4600) -> op5 at 5000: launched at 4900, after op4 ended
  //     (the host was late): not used.
  // Mean of {40, 60}: 50 ns (both under the 99th percentile).
  traces::Trace t;
  t.meta.source = traces::Source::engine_cpu;
  traces::RankTrace& r = t.add_rank(0);
  const uint32_t host = t.add_lane(r, "host", traces::LaneKind::host);
  const uint32_t compute = t.add_lane(r, "compute", traces::LaneKind::compute);
  const uint32_t comm = t.add_lane(r, "comm", traces::LaneKind::comm);
  const int64_t starts[] = {0, 1040, 2100, 3600, 5000};
  const int64_t launched[] = {0, 100, 200, 300, 4900};
  for (uint32_t i = 0; i < 5; ++i) {
    traces::Event& h = traces::add_event(r, host, t.intern("cudaLaunchKernel"),
                                         traces::Category::host, launched[i], 10);
    h.correlation = i + 1;
    traces::Event& e = traces::add_event(r, compute, t.intern("fc.forward"),
                                         traces::Category::compute, starts[i], 1000);
    e.correlation = i + 1;
    e.op = t.intern("linear");
    e.flops = 1000000;
  }
  traces::Event& ag = traces::add_event(r, comm, t.intern("all_gather"),
                                        traces::Category::comm_all_gather, 2900, 600);
  ag.bytes = 1 << 20;
  sim::CalibrationOptions o;
  o.base = sim::hardware_preset("cpu-local");
  o.group_size = 1;
  const sim::CalibrationResult res = sim::calibrate({{"gaps", &t}}, {}, o);
  INFO(sim::format_calibration_report(res.report));
  CHECK(res.report.dispatch.fitted);
  CHECK(res.report.dispatch.gaps == 2);
  CHECK(res.report.dispatch.ns == 50);
  CHECK(res.hw.op_dispatch_ns == 50);
  CHECK_THAT(sim::format_calibration_report(res.report),
             Catch::Contains("op dispatch 0.050 us (base 0 us): mean of 2 gap(s)"));
  CHECK(sim::calibration_report_to_json(res.report)["op_dispatch"]["ns"] == 50);

  // A simulator trace has no launch events: no gap qualifies, the base's value stays.
  Planned p = plan_for(scenarios()[0]);
  sim::HardwareModel truth = truth_hw();
  truth.op_dispatch_ns = 0;
  const sim::SimResult sr = simulate(p, truth);
  sim::CalibrationOptions base = h100_options();
  base.base.op_dispatch_ns = 777;
  const sim::CalibrationResult kept = sim::calibrate({{"sim", &sr.trace}}, {}, base);
  CHECK_FALSE(kept.report.dispatch.fitted);
  CHECK(kept.hw.op_dispatch_ns == 777);
}

TEST_CASE("backward events fit TYPE.backward apart from their forward type", "[sim][calibrate]") {
  // The truth prices linear backward at 0.25 and forward at 0.55: both come
  // back, each from its own events (the simulator names backward ops " bwd").
  Planned p = plan_for(scenarios()[0]);
  sim::HardwareModel truth = truth_hw();
  truth.efficiency["linear.backward"] = 0.25;
  const sim::SimResult sr = simulate(p, truth);
  const sim::CalibrationResult r = sim::calibrate({{"split", &sr.trace}}, {}, h100_options());
  INFO(sim::format_calibration_report(r.report));
  const plan::DType dt = r.report.efficiency.front().dtype;
  CHECK(std::fabs(r.hw.efficiency_of("linear.backward", dt, 1e9) - 0.25) / 0.25 < 1e-4);
  CHECK(std::fabs(r.hw.efficiency_of("linear", dt, 1e9) - 0.55) / 0.55 < 1e-4);
  CHECK(std::fabs(r.hw.efficiency_of("attention.backward", dt, 1e9) - 0.35) / 0.35 < 1e-4);
}

TEST_CASE("a direction without a fit takes the other direction's, not the base's",
          "[sim][calibrate]") {
  // Backward attention events removed: attention.backward has nothing of
  // its own, so it gets the fitted forward 0.35, not the base's 0.9; the
  // report says so.
  Planned p = plan_for(scenarios()[0]);
  const sim::SimResult sr = simulate(p, truth_hw());
  traces::Trace t = sr.trace;
  for (traces::RankTrace& r : t.ranks)
    r.events.erase(std::remove_if(r.events.begin(), r.events.end(),
                                  [&](const traces::Event& e) {
                                    const std::string_view name = t.str(e.name);
                                    return e.op != traces::kNoString &&
                                           t.str(e.op) == "attention" && name.size() > 4 &&
                                           name.substr(name.size() - 4) == " bwd";
                                  }),
                   r.events.end());
  sim::CalibrationOptions o = h100_options();
  o.base.efficiency["attention.backward"] = 0.9;  // what the base would say
  const sim::CalibrationResult r = sim::calibrate({{"no-bwd", &t}}, {}, o);
  INFO(sim::format_calibration_report(r.report));
  const plan::DType dt = r.report.efficiency.front().dtype;
  CHECK(o.base.efficiency_of("attention.backward", dt, 1e9) == 0.9);
  CHECK(std::fabs(r.hw.efficiency_of("attention", dt, 1e9) - 0.35) / 0.35 < 1e-4);
  CHECK(r.hw.efficiency_of("attention.backward", dt, 1e9) ==
        r.hw.efficiency_of("attention", dt, 1e9));
  CHECK(r.hw.efficiency_of("attention.backward", dt, 1e12) ==
        r.hw.efficiency_of("attention", dt, 1e12));
  bool noted = false;
  for (const std::string& n : r.report.notes)
    noted = noted || n.find("attention.backward (" + std::string(plan::dtype_name(dt)) +
                            "): no fit of its own; takes attention's") != std::string::npos;
  CHECK(noted);
}
