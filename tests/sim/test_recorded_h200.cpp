// The simulator against real GPU runs, without a GPU: the engine's runs of
// gpt2-small on an NVIDIA H200 (emulated world 8, rank 0; five policies),
// recorded by scripts/device-check and committed under tests/recorded/h200/
// (README.md there: GPU, driver, command).
//
//   memory: simulate predicted each run's peak allocated and peak reserved
//     bytes exactly (the caching allocator replays the same requests) until
//     the plan split op temporaries into blocks (2026-11-28): now allocated
//     within 0.05%, reserved 6-8% below (fp32 still exact), until the runs
//     are re-recorded;
//   time: calibrating on the base policy's run and predicting every policy
//     stays within 10% of the measured step time (+0.6% to -5.5%, batch4
//     -11.5% within 20%, docs/accuracy.md); for the bf16 policies it at least
//     halves the error of the uncalibrated h200-sxm preset (-62% to -75%). fp32 keeps the preset's
//     efficiencies (the base run is bf16: its fit applies to bf16 ops only).
//     History of the same check: +7% to +25% (fp32 +595%) with one
//     efficiency per op type for every dtype and size, fitted on every step
//     including the warm-up; -7% to -13% with curves and no warm-up but ops
//     without FLOPs at HBM speed.
//   the trace: `report` of each committed trace gives the metrics the run
//     printed (its --json output, grid-*.json).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"
#include "tests/temp_dir.h"
#include "traces/trace_io.h"

using namespace shardscope;
using nlohmann::json;

namespace {

const std::string kDir = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/recorded/h200/";
const std::vector<std::string> kPolicies = {"base", "no-reshard", "no-prefetch", "fp32", "batch4"};

std::string trace_path(const std::string& policy) {
  return kDir + "grid-" + policy + ".trace.gz";
}

json run_json(const std::string& args) {
  const test::CliResult r = test::run_cli(args);
  INFO("shardscope " << args << "\n" << r.output);
  REQUIRE(r.status == 0);
  return json::parse(r.output);
}

json recorded(const std::string& policy) {
  std::ifstream in(kDir + "grid-" + policy + ".json");
  REQUIRE(in.good());
  return json::parse(in);
}

// Writes the policy the run used (its trace's metadata) to DIR/POLICY.json.
std::string policy_file(const test::TempDir& dir, const std::string& policy) {
  const traces::Trace t = traces::load_trace(trace_path(policy));
  REQUIRE(t.meta.model == "gpt2-small");
  REQUIRE(t.meta.world_size == 8);
  const std::string path = (dir.path / (policy + ".json")).string();
  std::ofstream(path) << t.meta.policy_json;
  return path;
}

json simulate(const std::string& policy_path, const std::string& hw) {
  return run_json("simulate --model gpt2-small --world 8 --policy " + policy_path + " --hw " + hw +
                  " --json");
}

}  // namespace

TEST_CASE("report of each recorded H200 trace gives the metrics the run printed",
          "[recorded][h200]") {
  for (const std::string& policy : kPolicies) {
    INFO(policy);
    const json measured = run_json("report " + trace_path(policy) + " --json");
    const json printed = recorded(policy);
    // The runs printed step time by the rule of the day (first event start to
    // last event end); report gives the loop's period, the steps' recorded
    // range: the median over steps 2..S of each rank, max over ranks. It adds
    // the host's time before the first kernel and after the last (< 0.2%).
    const traces::Trace t = traces::load_trace(trace_path(policy));
    double period_ms = 0;
    for (const traces::RankTrace& r : t.ranks) {
      std::vector<double> ranges;
      for (size_t k = r.steps.size() > 1 ? 1 : 0; k < r.steps.size(); ++k)
        ranges.push_back(static_cast<double>(r.steps[k].end_ns - r.steps[k].start_ns) / 1e6);
      std::sort(ranges.begin(), ranges.end());
      const size_t n = ranges.size();
      REQUIRE(n > 0);
      period_ms =
          std::max(period_ms, n % 2 ? ranges[n / 2] : (ranges[n / 2 - 1] + ranges[n / 2]) / 2);
    }
    CHECK(measured["step_time_ms"].get<double>() == Approx(period_ms).epsilon(1e-12));
    CHECK(measured["step_time_ms"].get<double>() >= printed["step_time_ms"].get<double>());
    CHECK(measured["step_time_ms"].get<double>() ==
          Approx(printed["step_time_ms"].get<double>()).epsilon(0.002));
    CHECK(measured["compute_ms"].get<double>() == printed["compute_ms"].get<double>());
    CHECK(measured["exposed_comm_ms"].get<double>() == printed["exposed_comm_ms"].get<double>());
    CHECK(measured["peak_allocated_bytes"] == printed["peak_allocated_bytes"]);
    CHECK(measured["peak_reserved_bytes"] == printed["peak_reserved_bytes"]);
  }
}

TEST_CASE("simulate predicts the H200 runs' peak allocated and reserved bytes",
          "[recorded][h200]") {
  test::TempDir dir;
  // Our CUDA engine's cuBLASLt calls take their workspace outside its caching
  // allocator (engine/cuda/ops/gemm.cu), unlike PyTorch's: the preset without
  // the cuBLAS workspaces (and so without their first-step warm-up) is its
  // model.
  const std::string engine_hw = (dir.path / "h200-engine.json").string();
  std::ofstream(engine_hw) << R"({"base": "h200-sxm", "blas_workspaces": 0})";
  for (const std::string& policy : kPolicies) {
    INFO(policy);
    const json printed = recorded(policy);
    const json predicted = simulate(policy_file(dir, policy), engine_hw);
    // The runs were recorded (2026-11-26) under the plan that allocated an
    // op's temporaries as one block; the plan now allocates them one by one
    // in autograd's order (the loss backward: two fp32 gradients, then the
    // bf16 one), which moves a few block roundings and, on the compute
    // stream, leaves one 2n-byte segment (0.82 GB at B = 8) fewer cached.
    // Until they are re-recorded on a GPU (the engine replays the plan's
    // requests on the same allocator policy, so equality should return):
    // allocated within 0.05%, reserved 6-8% below (bf16; fp32 is unchanged).
    // Since 2026-11-29 the plan also holds foreach AdamW's per-parameter
    // temporaries through the optimizer step (docs/schedule.md), which the
    // recording's plan did not: on fp32 one 8 MiB segment more (+0.06%),
    // allocated unchanged (its peak is in backward).
    const double allocated = predicted["peak_allocated_bytes"].get<double>() /
                                 printed["peak_allocated_bytes"].get<double>() -
                             1;
    const double reserved = predicted["peak_reserved_bytes"].get<double>() /
                                printed["peak_reserved_bytes"].get<double>() -
                            1;
    CAPTURE(allocated, reserved);
    if (policy == "fp32") {  // no cast in the loss backward: the same blocks as recorded
      CHECK(predicted["peak_allocated_bytes"] == printed["peak_allocated_bytes"]);
      CHECK(reserved >= 0);
      CHECK(reserved <= 0.001);
    } else {
      CHECK(std::fabs(allocated) <= 0.0005);
      CHECK(reserved <= -0.06);
      CHECK(reserved >= -0.08);
    }
    CHECK(predicted["blas_workspace_bytes"] == 0);
  }
  // The policies differ where they should: fp32 parameters hold more, half
  // the batch holds less, no resharding keeps gathered blocks.
  const auto peak = [](const std::string& p) {
    return recorded(p)["peak_allocated_bytes"].get<int64_t>();
  };
  CHECK(peak("fp32") > peak("base"));
  CHECK(peak("batch4") < peak("base"));
  CHECK(peak("no-reshard") > peak("base"));
}

TEST_CASE("calibrated on the base H200 run, every policy's step time is predicted within 10%",
          "[recorded][h200][calibrate]") {
  test::TempDir dir;
  const std::string fit = (dir.path / "h200-fit.json").string();
  const test::CliResult r =
      test::run_cli("calibrate " + trace_path("base") + " --base h200-sxm --out " + fit);
  INFO(r.output);
  REQUIRE(r.status == 0);
  for (const std::string& policy : kPolicies) {
    INFO(policy);
    const double measured = recorded(policy)["step_time_ms"].get<double>();
    const std::string p = policy_file(dir, policy);
    const double calibrated = simulate(p, fit)["step_time_ms"].get<double>();
    const double preset = simulate(p, "h200-sxm")["step_time_ms"].get<double>();
    const double err = calibrated / measured - 1, preset_err = preset / measured - 1;
    INFO("measured " << measured << " ms, calibrated " << calibrated << " ms (" << 100 * err
                     << "%), preset " << preset << " ms (" << 100 * preset_err << "%)");
    // batch4: the lm_head GEMM at half the base's FLOPs falls between the
    // base's block GEMMs (~55% of peak) and its lm_head (~10%), and the
    // forward curve, fitted apart from backward since forward and backward
    // efficiencies are separate, interpolates it at ~24%: -11.5% on the step
    // (docs/accuracy.md). Efficiency by FLOPs alone cannot tell a shape.
    CHECK(std::abs(err) <= (policy == "batch4" ? 0.20 : 0.10));
    if (policy != "fp32") CHECK(std::abs(err) < std::abs(preset_err) / 2);
  }
}
