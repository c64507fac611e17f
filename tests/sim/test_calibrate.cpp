// Calibration (sim/calibrate.h) and the nccl-tests reader (sim/nccl_tests.h):
// recovery of known figures from traces simulated with them and from
// nccl-tests text generated with them, the JSON round trip, bad input, the CLI.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <set>

#include "plan/models.h"
#include "plan/schedule.h"
#include "sim/calibrate.h"
#include "sim/cost_model.h"
#include "sim/nccl_tests.h"
#include "sim/simulator.h"
#include "tests/cli/run_cli.h"
#include "tests/plan/planned.h"
#include "tests/temp_dir.h"
#include "traces/trace_io.h"

using namespace shardscope;
using nlohmann::json;

namespace {

// The "true" hardware the synthetic traces are simulated on: the H100 preset's
// peaks and HBM bandwidth (so the H100 preset is a valid base), with other
// efficiencies, contention, links, and three explicit collective fits.
sim::HardwareModel truth_hw() {
  sim::HardwareModel h = sim::hardware_preset("h100-sxm");
  h.name = "truth";
  // One efficiency per type in every dtype: the preset's published bf16
  // curves (which take precedence over the scalar) are dropped.
  h.efficiency_curves.clear();
  h.efficiency["linear"] = 0.55;
  h.efficiency["attention"] = 0.35;
  // Trace events carry FLOPs, not GEMM shapes: calibrate fits one linear
  // efficiency per dtype, exact only without the shape terms. The preset's
  // memory fractions stay (calibrate prices the memory roof with them).
  h.op_level.gemm.switch_off();
  h.contention_factor = 1.25;
  h.nvlink_bus_bytes_per_s = 360e9;
  h.nvlink_latency_ns = 1500;
  h.collective_latency_ns = 6000;
  h.ib_bytes_per_s = 40e9;
  h.ib_latency_ns = 4000;
  h.collectives = {{plan::OpKind::all_gather, 2, false, 9000, 200e9},
                   {plan::OpKind::reduce_scatter, 2, false, 11000, 180e9},
                   {plan::OpKind::all_reduce, 2, true, 25000, 30e9}};
  return h;
}

struct Scenario {
  std::string model;
  json policy;
  int64_t world;
};

const json kBlock = {{"type", "class"}, {"classes", {"GPT2Block"}}};
const json kLlamaBlock = {{"type", "class"}, {"classes", {"LlamaDecoderLayer"}}};

// FSDP over 2, 4, 8 and 16 ranks (16: two nodes), bf16 and fp32, hybrid
// sharding (all-reduce across nodes), DDP (all-reduce on one node),
// activation checkpointing; batch sizes 1-4.
std::vector<Scenario> scenarios() {
  return {
      {"gpt2-small", {{"wrap", kBlock}, {"batch_size", 1}, {"seq_len", 512}}, 2},
      {"gpt2-small",
       {{"wrap", kBlock},
        {"batch_size", 2},
        {"seq_len", 512},
        {"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "bf16"}}}},
       4},
      {"gpt2-small", {{"wrap", kBlock}, {"batch_size", 1}, {"seq_len", 128}}, 8},
      {"gpt2-small", {{"wrap", kBlock}, {"batch_size", 1}, {"seq_len", 256}}, 16},
      {"gpt2-small",
       {{"wrap", kBlock}, {"batch_size", 1}, {"seq_len", 128}, {"shard_group_size", 8}},
       16},
      {"gpt2-small",
       {{"wrap", kBlock}, {"batch_size", 1}, {"seq_len", 128}, {"shard_group_size", 1}},
       4},
      {"gpt2-small",
       {{"wrap", kBlock},
        {"batch_size", 2},
        {"seq_len", 256},
        {"activation_checkpointing", "full"}},
       2},
      {"llama-tiny", {{"wrap", kLlamaBlock}, {"batch_size", 2}}, 2},
  };
}

struct Planned : test::Planned {
  std::string policy_json;
};

Planned plan_for(const Scenario& s) {
  return {test::plan_model(s.model, s.policy, s.world), s.policy.dump()};
}

sim::SimResult simulate(const Planned& p, const sim::HardwareModel& hw) {
  sim::SimOptions o;
  o.policy_json = p.policy_json;
  return sim::simulate(p.graph, p.units, p.schedule, hw, o);
}

struct Synthetic {
  std::vector<Planned> planned;
  std::vector<sim::SimResult> results;
  std::vector<sim::CalibrationTrace> inputs() const {
    std::vector<sim::CalibrationTrace> v;
    for (size_t i = 0; i < results.size(); ++i)
      v.push_back({"scenario" + std::to_string(i), &results[i].trace});
    return v;
  }
};

const Synthetic& synthetic() {
  static const Synthetic s = [] {
    Synthetic out;
    const sim::HardwareModel truth = truth_hw();
    for (const Scenario& sc : scenarios()) {
      out.planned.push_back(plan_for(sc));
      out.results.push_back(simulate(out.planned.back(), truth));
      REQUIRE(out.results.back().fits);
    }
    return out;
  }();
  return s;
}

sim::CalibrationOptions h100_options() {
  sim::CalibrationOptions o;
  o.base = sim::hardware_preset("h100-sxm");
  o.name = "fitted";
  return o;
}

const sim::CollectiveReport* find_fit(const sim::CalibrationReport& r, plan::OpKind kind,
                                      int64_t ranks, bool multi_node) {
  for (const sim::CollectiveReport& c : r.collectives)
    if (c.fit.kind == kind && c.fit.ranks == ranks && c.fit.multi_node == multi_node) return &c;
  return nullptr;
}

// The truth's collective figures for (kind, span): its explicit fit, else the
// ring/tree closed form's latency (time at S = 0) and bus bandwidth.
sim::CollectiveFit expected_fit(const sim::HardwareModel& h, plan::OpKind kind,
                                const sim::GroupSpan& span) {
  if (const sim::CollectiveFit* f = h.collective_fit(kind, span.ranks, span.nodes > 1)) return *f;
  sim::CollectiveFit f;
  f.kind = kind;
  f.ranks = span.ranks;
  f.multi_node = span.nodes > 1;
  f.latency_ns = sim::collective_time(h, kind, 0.0, span).ns;
  f.bus_bytes_per_s = span.nodes > 1
                          ? std::min(h.nvlink_bus_bytes_per_s,
                                     static_cast<double>(span.min_per_node) * h.ib_bytes_per_s)
                          : h.nvlink_bus_bytes_per_s;
  return f;
}

std::vector<int> range(int first, int n, int step = 1) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(first + i * step);
  return v;
}

// nccl-tests prints times with getFloatStr(value, 7): 2 decimals below 1000,
// then 1, then 0 (util.cu).
std::string nccl_float(double v, int width) {
  int power = 0;
  for (uint64_t val = 1; v >= static_cast<double>(val); val *= 10) power++;
  char buf[64];
  if (power < width - 2)
    std::snprintf(buf, sizeof buf, "%*.2f", width, v);
  else if (power < width - 1)
    std::snprintf(buf, sizeof buf, "%*.1f", width, v);
  else
    std::snprintf(buf, sizeof buf, "%*.0f", width, v);
  return buf;
}

// A complete nccl-tests output (2.13-era layout) for `kind` over `hosts` x
// `per_host` ranks whose out-of-place time is latency + f S (n-1)/n / busbw.
std::string nccl_output(const std::string& kind, int hosts, int per_host, double latency_us,
                        double busbw_gbps, int64_t min_bytes, int64_t max_bytes) {
  const int n = hosts * per_host;
  const double f = kind == "all_reduce" ? 2.0 : 1.0;
  std::string s;
  s += "# nccl-tests version 2.13.8 nccl-headers=21903 nccl-library=21903\n";
  s += "# Collective test starting: " + kind + "_perf\n";
  s += "# nThread 1 nGpus 1 minBytes " + std::to_string(min_bytes) + " maxBytes " +
       std::to_string(max_bytes) +
       " step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n";
  s += "#\n# Using devices\n";
  char buf[512];
  for (int r = 0; r < n; ++r) {
    std::snprintf(buf, sizeof buf,
                  "#  Rank %2d Group  0 Pid %6d on %10s device %2d [0x%02x] NVIDIA H100 80GB "
                  "HBM3\n",
                  r, 4100 + r, ("node-" + std::to_string(r / per_host)).c_str(), r % per_host,
                  0x18 + 16 * (r % per_host));
    s += buf;
  }
  s += "NCCL version 2.19.3+cuda12.3\n";
  s += "#\n#                                                              out-of-place       "
       "                in-place          \n";
  s += "#       size         count      type   redop    root     time   algbw   busbw #wrong  "
       "   time   algbw   busbw #wrong\n";
  s += "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)         "
       "   (us)  (GB/s)  (GB/s)       \n";
  const std::string redop = kind == "all_reduce" ? "sum" : "none";
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const double t_us =
        latency_us + f * static_cast<double>(bytes) * (n - 1) / n / (busbw_gbps * 1e9) * 1e6;
    const std::string time = nccl_float(t_us, 7);
    const double algbw = static_cast<double>(bytes) / (std::stod(time) * 1e-6) / 1e9;
    const double busbw = algbw * f * (n - 1) / n;
    const int64_t count = kind == "all_reduce" ? bytes / 4 : bytes / 4 / n;
    std::snprintf(buf, sizeof buf, "%12lld  %12lld  %8s  %6s  %6i  %7s  %6s  %6s  %6s",
                  static_cast<long long>(bytes), static_cast<long long>(count), "float",
                  redop.c_str(), -1, time.c_str(), nccl_float(algbw, 6).c_str(),
                  nccl_float(busbw, 6).c_str(), "0");
    s += buf;
    std::snprintf(buf, sizeof buf, "  %7s  %6s  %6s  %6s\n", time.c_str(),
                  nccl_float(algbw, 6).c_str(), nccl_float(busbw, 6).c_str(), "N/A");
    s += buf;
  }
  s += "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 123.456 \n#\n";
  s += "# Collective test concluded: " + kind + "_perf\n#\n";
  return s;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const sim::Error& e) {
    return e.what();
  }
  return "(no sim::Error)";
}

}  // namespace

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
