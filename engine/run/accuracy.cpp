#include "engine/run/accuracy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "engine/exec/train.h"
#include "plan/policy.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "sim/simulator.h"
#include "traces/merge.h"

namespace shardscope::engine::run {

traces::Trace train_policy_threads(const plan::Graph& graph, const std::string& model_name,
                                   const nlohmann::json& policy, int world, int64_t steps) {
  exec::TrainConfig c;
  c.graph = &graph;
  c.policy = plan::policy_from_json(policy);
  (void)plan::validate_policy(c.policy, graph, world);
  c.world_size = world;
  c.steps = steps;
  c.model_name = model_name;
  const std::vector<exec::RankRun> runs = exec::train_threads(c, {});
  traces::Trace merged;
  merged.meta = runs.at(0).trace.meta;
  merged.meta.clock_alignment = "one process (ranks as threads)";
  for (const exec::RankRun& r : runs) traces::merge_ranks(merged, r.trace);
  return merged;
}

std::vector<MeasuredRun> measure_runs(const MeasureConfig& config) {
  if (!config.graph) throw std::invalid_argument("measure_runs: no graph");
  if (config.steps < 2)
    throw std::invalid_argument("measure: steps must be >= 2 (the first is warm-up)");
  if (config.dtypes.empty()) throw std::invalid_argument("measure: no compute dtype to measure");
  const plan::Policy given = plan::policy_from_json(config.policy);
  const int64_t batch = given.batch_size;
  std::vector<MeasuredRun> runs;
  for (plan::DType dtype : config.dtypes) {
    for (int64_t b : {batch, 2 * batch}) {
      plan::Policy policy = given;
      policy.batch_size = b;
      policy.mixed_precision.param_dtype = dtype;
      policy.mixed_precision.reduce_dtype = dtype;
      const nlohmann::json p = plan::policy_to_json(policy);
      MeasuredRun r;
      r.label = std::string(plan::dtype_name(dtype)) + " batch " + std::to_string(b);
      r.policy = p;
      r.trace =
          train_policy_threads(*config.graph, config.model_name, p, config.world, config.steps);
      runs.push_back(std::move(r));
    }
  }
  return runs;
}

sim::CalibrationResult calibrate_runs(const std::vector<MeasuredRun>& runs,
                                      const sim::HardwareModel& base, const std::string& name) {
  std::vector<sim::CalibrationTrace> in;
  for (const MeasuredRun& r : runs) {
    sim::CalibrationTrace t;
    t.name = r.label;
    t.trace = &r.trace;
    in.push_back(t);
  }
  sim::CalibrationOptions o;
  o.base = base;
  o.name = name;
  return sim::calibrate(in, {}, o);
}

namespace {
double rel(double predicted, double measured) {
  return measured != 0 ? (predicted - measured) / measured : 0;
}
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

AccuracyRow accuracy_row(const plan::Graph& graph, const std::string& model_name,
                         const std::string& label, const nlohmann::json& policy,
                         const std::vector<const traces::Trace*>& runs,
                         const sim::HardwareModel& hw, int world) {
  if (runs.empty()) throw std::invalid_argument("accuracy_row: no measured run");
  AccuracyRow row;
  row.label = label;
  row.policy = policy;
  std::vector<traces::MetricValues> measured;
  for (const traces::Trace* t : runs) {
    measured.push_back(traces::compute_metrics(*t).total);
    row.run_step_ms.push_back(measured.back().step_time_ms);
  }
  // The median run (the lower middle of an even count) is compared whole,
  // so its metrics stay consistent with each other.
  std::vector<size_t> order(measured.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return measured[a].step_time_ms < measured[b].step_time_ms;
  });
  row.measured = measured[order[(order.size() - 1) / 2]];
  const plan::Policy p = plan::policy_from_json(policy);
  const plan::World w = plan::validate_policy(p, graph, world);
  const plan::UnitPlan units = plan::build_units(graph, p, w);
  const plan::Schedule s = plan::build_schedule(graph, p, units, 0);
  sim::SimOptions so;
  so.model_name = model_name;
  so.policy_json = policy.dump();
  so.record_trace = false;
  const sim::SimResult pr = sim::simulate(graph, units, s, hw, so);
  row.predicted_fits = pr.fits;
  row.predicted = pr.metrics.total;
  row.predicted.peak_allocated_bytes = pr.peak_allocated_bytes;
  row.predicted.peak_reserved_bytes = pr.peak_reserved_bytes;
  row.step_error = rel(row.predicted.step_time_ms, row.measured.step_time_ms);
  const double lo = measured[order.front()].step_time_ms, hi = measured[order.back()].step_time_ms;
  row.step_noise = row.measured.step_time_ms > 0 ? (hi - lo) / row.measured.step_time_ms : 0;
  return row;
}

void summarize(AccuracyTable* table) {
  std::vector<double> err, noise;
  for (const AccuracyRow& r : table->rows) {
    err.push_back(std::fabs(r.step_error));
    noise.push_back(r.step_noise);
  }
  table->median_abs_step_error = median(err);
  table->max_abs_step_error = err.empty() ? 0 : *std::max_element(err.begin(), err.end());
  table->median_step_noise = median(noise);
}

AccuracyTable accuracy_table(const plan::Graph& graph, const std::string& model_name,
                             const std::vector<std::pair<std::string, nlohmann::json>>& policies,
                             const sim::HardwareModel& hw, int world, int64_t steps, int runs) {
  if (runs < 1) throw std::invalid_argument("accuracy_table: runs must be >= 1");
  AccuracyTable table;
  for (const auto& [label, policy] : policies) {
    std::vector<traces::Trace> traces;
    for (int i = 0; i < runs; ++i)
      traces.push_back(train_policy_threads(graph, model_name, policy, world, steps));
    std::vector<const traces::Trace*> ptrs;
    for (const traces::Trace& t : traces) ptrs.push_back(&t);
    table.rows.push_back(accuracy_row(graph, model_name, label, policy, ptrs, hw, world));
  }
  summarize(&table);
  return table;
}

std::string format_accuracy_table(const AccuracyTable& table) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-24s %26s %26s %20s %18s %22s %7s\n", "policy",
                "step ms (meas pred err)", "compute ms (meas pred err)", "exposed comm ms",
                "overlap %", "peak alloc MiB", "noise");
  out += line;
  const auto mib = [](int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  for (const AccuracyRow& r : table.rows) {
    if (!r.predicted_fits) {
      std::snprintf(line, sizeof line, "%-24s predicted: does not fit in the model's memory\n",
                    r.label.c_str());
      out += line;
      continue;
    }
    std::snprintf(line, sizeof line,
                  "%-24s %8.2f %8.2f %+7.1f%% %8.2f %8.2f %+7.1f%% %6.2f %6.2f %5s %5.1f %5.1f %5s "
                  "%7.2f %7.2f %+5.1f%% %6.1f%%\n",
                  r.label.c_str(), r.measured.step_time_ms, r.predicted.step_time_ms,
                  100 * r.step_error, r.measured.compute_ms, r.predicted.compute_ms,
                  100 * rel(r.predicted.compute_ms, r.measured.compute_ms),
                  r.measured.exposed_comm_ms, r.predicted.exposed_comm_ms, "",
                  100 * r.measured.overlap, 100 * r.predicted.overlap, "",
                  mib(r.measured.peak_allocated_bytes), mib(r.predicted.peak_allocated_bytes),
                  100 * rel(static_cast<double>(r.predicted.peak_allocated_bytes),
                            static_cast<double>(r.measured.peak_allocated_bytes)),
                  100 * r.step_noise);
    out += line;
  }
  std::snprintf(line, sizeof line,
                "\n%zu policies: median |step error| %.1f%%, worst %.1f%%; median run-to-run "
                "noise (max - min over the runs) %.1f%%\n",
                table.rows.size(), 100 * table.median_abs_step_error,
                100 * table.max_abs_step_error, 100 * table.median_step_noise);
  out += line;
  return out;
}

}  // namespace shardscope::engine::run
