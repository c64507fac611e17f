// Fixtures of the calibration tests (test_calibrate*.cpp, test_nccl_tests.cpp):
// the "true" hardware and the scenarios simulated on it, their synthetic traces
// (simulated once per binary), and generated nccl-tests text.
#pragma once

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

namespace calibrate_test {

using namespace shardscope;
using nlohmann::json;

// The "true" hardware the synthetic traces are simulated on: the H100 preset's
// peaks and HBM bandwidth (so the H100 preset is a valid base), with other
// efficiencies, contention, links, and three explicit collective fits.
inline sim::HardwareModel truth_hw() {
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
inline std::vector<Scenario> scenarios() {
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

inline Planned plan_for(const Scenario& s) {
  return {test::plan_model(s.model, s.policy, s.world), s.policy.dump()};
}

inline sim::SimResult simulate(const Planned& p, const sim::HardwareModel& hw) {
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

inline const Synthetic& synthetic() {
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

inline sim::CalibrationOptions h100_options() {
  sim::CalibrationOptions o;
  o.base = sim::hardware_preset("h100-sxm");
  o.name = "fitted";
  return o;
}

inline const sim::CollectiveReport* find_fit(const sim::CalibrationReport& r, plan::OpKind kind,
                                             int64_t ranks, bool multi_node) {
  for (const sim::CollectiveReport& c : r.collectives)
    if (c.fit.kind == kind && c.fit.ranks == ranks && c.fit.multi_node == multi_node) return &c;
  return nullptr;
}

// The truth's collective figures for (kind, span): its explicit fit, else the
// ring/tree closed form's latency (time at S = 0) and bus bandwidth.
inline sim::CollectiveFit expected_fit(const sim::HardwareModel& h, plan::OpKind kind,
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

inline std::vector<int> range(int first, int n, int step = 1) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(first + i * step);
  return v;
}

// nccl-tests prints times with getFloatStr(value, 7): 2 decimals below 1000,
// then 1, then 0 (util.cu).
inline std::string nccl_float(double v, int width) {
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
inline std::string nccl_output(const std::string& kind, int hosts, int per_host, double latency_us,
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

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const sim::Error& e) {
    return e.what();
  }
  return "(no sim::Error)";
}

}  // namespace calibrate_test
