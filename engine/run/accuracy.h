// The calibrate -> predict loop on the CPU engine: policies trained for real
// on ranks as threads of this process, a hardware model fitted to measured
// runs (sim::calibrate), each policy predicted by the simulator and set
// beside its measurement. Used by `calibrate --measure`, `shardscope demo`
// and bench/accuracy_cpu (docs/accuracy.md).
//
// Units: milliseconds for times (medians over the steps after the first, as
// `report` gives them), bytes for memory, overlap a fraction in [0, 1].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/graph.h"
#include "sim/calibrate.h"
#include "sim/hardware.h"
#include "traces/metrics.h"
#include "traces/trace.h"

namespace shardscope::engine::run {

// One policy trained on `world` CPU ranks as threads for `steps` steps: the
// merged trace (metadata: model, policy JSON, engine-cpu) of every rank.
// Throws plan::Error for a policy the world cannot run, exec errors.
traces::Trace train_policy_threads(const plan::Graph& graph, const std::string& model_name,
                                   const nlohmann::json& policy, int world, int64_t steps);

// `calibrate --measure`: the model's own op shapes and its units'
// collectives, run on this machine. One short training run per measured
// configuration: each compute dtype in `dtypes` (the policy's
// mixed_precision.param_dtype and reduce_dtype set to it) at the policy's
// batch size and at twice it (two sizes per op, so efficiency by size and
// collectives' latency and bandwidth can be told apart). Every other key of
// the policy is kept.
struct MeasureConfig {
  const plan::Graph* graph = nullptr;
  std::string model_name;
  nlohmann::json policy = nlohmann::json::object();
  int world = 2;
  int64_t steps = 4;  // >= 2: the first is warm-up, left out of every fit
  std::vector<plan::DType> dtypes = {plan::DType::f32, plan::DType::bf16, plan::DType::f16};
};
struct MeasuredRun {
  std::string label;  // "fp32 batch 8"
  nlohmann::json policy;
  traces::Trace trace;
};
std::vector<MeasuredRun> measure_runs(const MeasureConfig& config);

// A fit of `runs` with sim::calibrate on `base`.
sim::CalibrationResult calibrate_runs(const std::vector<MeasuredRun>& runs,
                                      const sim::HardwareModel& base, const std::string& name);

// One policy measured (several runs: the median one is compared, their
// spread is the noise) and predicted.
struct AccuracyRow {
  std::string label;
  nlohmann::json policy;
  traces::MetricValues measured;    // the run with the median step time
  std::vector<double> run_step_ms;  // every run's step time, in run order
  traces::MetricValues predicted;   // simulate on the fitted model
  bool predicted_fits = true;
  // (predicted - measured) / measured of the step time; noise: (max - min)
  // / median of the runs' step times.
  double step_error = 0;
  double step_noise = 0;
};
struct AccuracyTable {
  std::vector<AccuracyRow> rows;
  double median_abs_step_error = 0;
  double max_abs_step_error = 0;
  double median_step_noise = 0;
};

// Trains each policy `runs` times (>= 1), simulates it on `hw` (world
// ranks, the same graph), and fills the table. `policies` are (label,
// policy JSON).
AccuracyTable accuracy_table(const plan::Graph& graph, const std::string& model_name,
                             const std::vector<std::pair<std::string, nlohmann::json>>& policies,
                             const sim::HardwareModel& hw, int world, int64_t steps, int runs);
// The same, with the measured runs already made (at least one).
AccuracyRow accuracy_row(const plan::Graph& graph, const std::string& model_name,
                         const std::string& label, const nlohmann::json& policy,
                         const std::vector<const traces::Trace*>& runs,
                         const sim::HardwareModel& hw, int world);
void summarize(AccuracyTable* table);

// The table as text: per policy step, compute, exposed communication,
// overlap and peak allocated, measured / predicted / error, and the noise.
std::string format_accuracy_table(const AccuracyTable& table);

}  // namespace shardscope::engine::run
