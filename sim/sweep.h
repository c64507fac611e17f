// What-if sweeps: the cartesian product of policy values (a grid) x world
// sizes, each configuration planned (plan/) and simulated without a trace on
// a thread pool, then ranked: the configurations that fit the memory limit by
// throughput (tokens/s), the Pareto front of tokens/s vs peak reserved memory, and a
// recommended policy compared with the base policy (docs/sweep.md).
//
// Results are in grid order and do not depend on the thread count: every
// configuration is simulated independently and deterministically.
//
// Memory does not grow with the grid: sweep_stream hands each configuration
// to a sink in grid order as it finishes (holding at most a bounded window of
// finished configurations that wait for an earlier one) and keeps only what
// the report needs: the counts, the first --top ranked and not fitting, the
// Pareto front and the rejection reasons (at most kMaxSweepReasons).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/graph.h"
#include "sim/hardware.h"
#include "traces/metrics.h"

namespace shardscope::sim {

/// One grid key (a policy key, dotted for nested keys: "mixed_precision.param_dtype")
/// and its values.
struct SweepAxis {
  std::string key;
  std::vector<nlohmann::json> values;  ///< non-empty
};

/// A grid JSON: an object whose every value is a non-empty array of values of
/// that policy key. Axes in the object's key order (alphabetical).
struct SweepGrid {
  std::vector<SweepAxis> axes;
  /// Product of the axes' lengths (1 for no axes); SIZE_MAX when it overflows.
  size_t size() const;
};

/// The most configurations (grid x worlds) a sweep accepts: at a few hundred
/// to a few thousand configurations per second and core, about a day's work.
constexpr uint64_t kMaxSweepConfigurations = 10'000'000;
/// Distinct rejection reasons counted one by one; further ones are counted together.
constexpr size_t kMaxSweepReasons = 1000;

/// grid x worlds configurations; throws Error giving the count (or "more than
/// 2^64" when it overflows) and kMaxSweepConfigurations when over it. Counted
/// before anything is allocated: a 1e12 grid is refused at once.
uint64_t count_configurations(const SweepGrid& grid, size_t worlds);

/// Throws Error naming the key for: a document that is not an object, a key
/// that is not a policy key (or is world_size: worlds come from the sweep's
/// options), a value that is not a non-empty array.
SweepGrid grid_from_json(const nlohmann::json& doc, const std::string& source = "grid");
/// A grid JSON file. Throws Error.
SweepGrid load_grid(const std::string& path);

/// The base policy with configuration `index` of the grid applied (axes vary
/// fastest last, like nested loops in axis order).
nlohmann::json grid_policy(const SweepGrid& grid, const nlohmann::json& base, size_t index);

struct SweepOptions {
  std::vector<int64_t> worlds = {8};  ///< outermost loop
  nlohmann::json base_policy = nlohmann::json::object();
  int64_t memory_limit_bytes = 0;  ///< 0: the hardware's memory
  int threads = 0;                 ///< 0: std::thread::hardware_concurrency()
  /// Called from worker threads (serialised) after each configuration.
  std::function<void(size_t done, size_t total)> progress;
  /// sweep_stream: how many of the ranked and of the not-fitting
  /// configurations SweepSummary keeps (the report's --top).
  size_t keep = 10;
};

struct SweepPoint {
  size_t config = 0;  ///< index in worlds x grid order
  int64_t world = 0;
  nlohmann::json policy;  ///< the policy document simulated
  bool rejected = false;  ///< the policy validation or planner refused it
  std::string reason;     ///< why, when rejected
  bool fits = false;      ///< no out-of-memory under the limit
  std::string oom_buffer;
  /// Top-level simulated metrics. When the configuration does not fit, the
  /// step stopped at the failed allocation: the time fields cover it only up
  /// to there and predict nothing (outputs leave them empty); the peaks are
  /// those up to the failure.
  traces::MetricValues metrics;
  /// Global tokens per optimizer step: world x batch_size x seq_len x
  /// grad_accum_steps; and their rate, tokens_per_step / step time (0 when
  /// not simulated or when it does not fit). The ranking's key: configurations
  /// with different batch sizes, sequence lengths or worlds compare by
  /// throughput.
  int64_t tokens_per_step = 0;
  double tokens_per_s = 0;
  size_t rank_classes = 0;  ///< ranks simulated for the world
  uint64_t sim_events = 0;
  bool pareto = false;  ///< on the front of (tokens/s, peak reserved) among those that fit
};

struct SweepResult {
  std::vector<SweepPoint> points;  ///< every configuration, rejected included, in config order
  size_t rejected = 0;
  /// Indices into points: those that fit, highest tokens/s first (ties: lower
  /// step time, then lower peak reserved).
  std::vector<size_t> ranking;
  int64_t best = -1;  ///< index into points of the first of the ranking; -1: none fits
  /// The base policy at the best configuration's world (for "what it gains").
  SweepPoint baseline;
  bool has_baseline = false;
  uint64_t sim_events = 0;  ///< over all configurations
};

/// What a streamed sweep keeps: bounded by SweepOptions::keep, the Pareto
/// front and kMaxSweepReasons, whatever the number of configurations.
struct SweepSummary {
  size_t total = 0;  ///< configurations, rejected included
  size_t rejected = 0;
  size_t fit = 0;         ///< simulated and fit the memory limit
  size_t do_not_fit = 0;  ///< simulated and ran out of memory
  uint64_t sim_events = 0;
  /// Rejection reasons with their counts, most frequent first (ties in the
  /// reasons' alphabetical order); at most kMaxSweepReasons distinct ones,
  /// the configurations of further reasons in other_reasons.
  std::vector<std::pair<std::string, size_t>> reasons;
  size_t other_reasons = 0;
  /// The first `keep` configurations of the ranking (SweepResult::ranking's order).
  std::vector<SweepPoint> top;
  /// The Pareto front in ranking order (pareto set); its first is the best.
  std::vector<SweepPoint> pareto;
  /// The first `keep` configurations that do not fit, in config order.
  std::vector<SweepPoint> first_do_not_fit;
  /// Index of the best among the simulated (not rejected) configurations in
  /// config order: its index in the sweep JSON's "configs"; -1: none fits.
  int64_t best_simulated_index = -1;
  SweepPoint baseline;  ///< as SweepResult::baseline
  bool has_baseline = false;
};

/// Every configuration in config order, from one thread at a time; `pareto`
/// is not set yet (the front is known at the end: SweepSummary::pareto).
using SweepSink = std::function<void(const SweepPoint&)>;

/// Runs the sweep, streaming: memory does not depend on the number of
/// configurations. Throws Error for an empty world list, bad options or more
/// than kMaxSweepConfigurations; configurations that the policy validation
/// rejects are counted, not thrown. An exception from the sink stops the sweep.
SweepSummary sweep_stream(const plan::Graph& graph, const SweepGrid& grid, const HardwareModel& hw,
                          const SweepOptions& options, const SweepSink& sink);

/// sweep_stream with every point kept (memory grows with the grid: for
/// small sweeps and tests; the CLI streams). Throws what sweep_stream throws.
SweepResult run_sweep(const plan::Graph& graph, const SweepGrid& grid, const HardwareModel& hw,
                      const SweepOptions& options);

/// The dotted keys whose values differ between two policy documents, as
/// "key: a -> b" (for explaining a recommendation).
std::vector<std::string> policy_differences(const nlohmann::json& from, const nlohmann::json& to);

/// A policy document's `overrides`, one readable line each (for the sweep
/// explorer and reports): "layers.3: reshard_after_forward false",
/// "[<root>, norm]: mixed_precision bf16/fp32" (param/reduce dtype). Empty
/// when the policy has none; a malformed entry is shown as its JSON.
std::vector<std::string> overrides_labels(const nlohmann::json& policy);

}  // namespace shardscope::sim
