// Calibration: fits a HardwareModel to measured data (docs/calibration.md).
//
//   compute efficiency per op type, from the compute events of traces that
//     carry FLOPs and bytes: dur = max(FLOPs / (peak[dtype] x eff), bytes / HBM bw);
//     only uncontended, compute-bound events say anything about eff;
//   the contention factor, from compute events that started while a
//     collective of the same rank was running: dur = factor x uncontended prediction;
//   collective latency and bus bandwidth per (kind, ranks, multi_node), from
//     the collectives of traces and from nccl-tests tables:
//     t = latency + f S (n-1)/n / busbw, f = 2 for all-reduce, else 1.
//
// Peaks, HBM bandwidth, gpus_per_node and every other figure come from the
// base model unchanged; the result is the base with the fitted fields
// overridden, plus a report of the fit residuals.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/graph.h"
#include "sim/hardware.h"
#include "sim/nccl_tests.h"
#include "traces/trace.h"

namespace shardscope::sim {

struct CalibrationTrace {
  std::string name;                      ///< its file, for messages
  const traces::Trace* trace = nullptr;  ///< must outlive calibrate()
};

struct CalibrationOptions {
  HardwareModel base;               ///< the model to start from
  std::string name = "calibrated";  ///< name of the result
  /// Compute dtype of every trace's graph ops; default: the trace metadata's
  /// policy (mixed_precision.param_dtype), else fp32.
  std::optional<plan::DType> dtype;
  /// > 0: the shard group size N of every trace (overrides the policy; needed
  /// for traces without one): all-gathers and reduce-scatters run over N
  /// consecutive ranks, all-reduces over the ranks equal mod N (plan/'s layout).
  int64_t group_size = 0;
  /// An uncontended event whose HBM roof (bytes / HBM bw) reaches this
  /// fraction of its duration is memory-bound: it says nothing about eff.
  double memory_bound_fraction = 0.99;
};

/// Residuals are relative, (predicted - measured) / measured, of durations,
/// with the predictions rounded to whole nanoseconds as the simulator does.
struct EfficiencyReport {
  std::string op_type;
  /// The compute dtype of its events: the fitted efficiency is written to the
  /// model's dtype_efficiency[dtype] and applies to ops of that dtype only.
  plan::DType dtype = plan::DType::f32;
  int64_t events = 0;        ///< uncontended compute-bound events the fit used
  int64_t memory_bound = 0;  ///< uncontended events the HBM roof explains
  int64_t contended = 0;     ///< started while a collective ran (used for the contention factor)
  double base_efficiency = 0;
  double efficiency = 0;  ///< fitted, or the base's when !fitted
  /// When the compute-bound events span at least two sizes (factor-2 FLOPs
  /// bins): efficiency by size, written to efficiency_curves[dtype][type]
  /// and used instead of `efficiency`; empty otherwise.
  std::vector<EfficiencyKnot> curve;
  bool fitted = false;  ///< false: no compute-bound event, the base's value is kept
  /// Fitted and written to the model: only graph op types are (a Kineto
  /// kernel named by its kernel is fitted and reported, not written).
  bool written = false;
  bool clamped = false;         ///< the fit came out above 1 and was capped at 1
  double rms_rel_residual = 0;  ///< over all uncontended events of the type
  double max_rel_residual = 0;
  /// Fitted: the base's predicted compute time over the measured time of the
  /// compute-bound events (> 1: faster than the base). Reported, with a note
  /// naming the dtypes whose efficiency for this type stays the base's.
  double speed_vs_base = 0;
};

/// A device op kind without FLOPs (plan::op_kind_name: grad_cast, copy_out,
/// cast_params, optimizer, ...): t = fixed + bytes / (HBM bw x eff), fitted
/// like a collective (two sizes or more: fixed and eff; one size: eff only).
struct MemoryOpReport {
  std::string kind;
  int64_t events = 0;  ///< uncontended, after the warm-up
  int64_t distinct_sizes = 0;
  MemoryOpFit fit;
  bool fixed_from_zero = false;  ///< one size, or a negative intercept: fixed 0
  bool capped = false;           ///< bandwidth efficiency above 1: capped at 1
  double rms_rel_residual = 0;
  double max_rel_residual = 0;
};

struct CollectiveReport {
  CollectiveFit fit;
  int64_t points = 0;
  int64_t trace_points = 0;  ///< collective events of traces
  int64_t nccl_points = 0;   ///< nccl-tests rows
  int64_t distinct_sizes = 0;
  /// One size only: latency cannot be told from bandwidth; the base model's
  /// latency for this case was kept and only the bandwidth fitted.
  bool latency_from_base = false;
  bool latency_clamped = false;  ///< the fitted intercept was negative: latency 0
  double rms_rel_residual = 0;
  double max_rel_residual = 0;
};

struct ContentionReport {
  int64_t events = 0;  ///< overlapped compute events used
  double base_factor = 1;
  double factor = 1;
  bool fitted = false;   ///< false: no overlapped event, the base's factor is kept
  bool clamped = false;  ///< the fit came out below 1 and was raised to 1
  double rms_rel_residual = 0;
  double max_rel_residual = 0;
};

/// The analytical one-node ring (cost_model.h: t = C + f (n-1) hop + f S
/// (n-1)/n / B) refitted from the one-node collective fits, so that a fit
/// at one group size predicts another: B = nvlink_bus_bytes_per_s, the
/// points' mean busbw (weighted by points); C = collective_latency_ns and
/// hop = nvlink_latency_ns from the fits' latencies against f (n-1) (least
/// squares with two or more distinct f (n-1); with one, hop is the base's).
/// Fits whose latency came from the base are not used for C and hop.
struct RingScalingReport {
  bool fitted = false;
  int64_t fits = 0;  ///< one-node fits used
  double bus_bytes_per_s = 0;
  int64_t collective_latency_ns = 0;
  int64_t hop_ns = 0;
  bool hop_from_base = false;
};

/// op_dispatch_ns: the mean gap (the largest 1% left out) between consecutive events of a device
/// lane (not a collective lane) where the second could have started at the
/// first's end: its launch (the host event of its correlation id; ops
/// without one are not used; an engine trace without launch events counts
/// its ops as launched, its host running ahead) had ended, and no
/// event of another lane of the rank ended inside the gap (nothing it could
/// have waited for). After the warm-up step.
struct DispatchReport {
  int64_t gaps = 0;  ///< qualifying gaps
  int64_t base_ns = 0;
  int64_t ns = 0;
  bool fitted = false;            ///< false: no qualifying gap, the base's value is kept
  double p10_ns = 0, p90_ns = 0;  ///< spread of the gaps
};

/// launch_overhead_ns: the mean host time between consecutive launches (two
/// host-lane events with correlation ids, nothing between them on the host
/// lane: a wait or a sync breaks the pair); the largest 1% left out.
struct LaunchReport {
  int64_t launches = 0;  ///< qualifying pairs
  int64_t base_ns = 0;
  int64_t ns = 0;
  bool fitted = false;  ///< false: no pair, the base's value is kept
};

struct CalibrationReport {
  std::string name;  ///< of the result
  std::string base;  ///< name of the base model
  std::vector<std::string> traces;
  std::vector<std::string> nccl_tables;       ///< "FILE:LINE (all_gather, 8 ranks)"
  std::vector<EfficiencyReport> efficiency;   ///< by op type
  std::vector<MemoryOpReport> memory_ops;     ///< by op kind
  std::vector<CollectiveReport> collectives;  ///< by kind, ranks, multi_node
  ContentionReport contention;
  DispatchReport dispatch;
  RingScalingReport ring;
  LaunchReport launch;
  int64_t compute_events = 0;         ///< compute events of all traces
  int64_t compute_without_flops = 0;  ///< of them: no FLOPs (non-graph ops, kernels), unused
  int64_t compute_at_boundary = 0;    ///< started exactly as a collective started or ended: unused
  /// Compute events with FLOPs, and collectives, that started before a
  /// rank's second step (its warm-up step, or before its first): unused.
  int64_t compute_warmup = 0;
  int64_t collectives_warmup = 0;
  int64_t collective_events = 0;    ///< collective events of all traces
  int64_t collectives_skipped = 0;  ///< scalar all-reduces, one-rank groups, other collectives
  /// Collective instances (the k-th of a kind over a group) found on every
  /// rank of their group: their points are durations from the last rank's
  /// arrival, not each rank's own start (the earlier ranks' wait is not
  /// transfer time).
  int64_t collectives_matched = 0;
  std::vector<std::string> notes;  ///< what was kept from the base and why
};

struct CalibrationResult {
  HardwareModel hw;
  CalibrationReport report;
};

/// traces::load_trace(path) with its errors (missing file, malformed trace)
/// as Error "trace PATH: ...".
traces::Trace load_calibration_trace(const std::string& path);

/// Throws Error: a trace with neither compute events carrying FLOPs nor
/// collectives; collectives whose process group cannot be derived (no policy
/// in the metadata and no group_size; a reshard_after_forward=k policy whose
/// backward all-gathers run over smaller groups); nothing fitted at all.
CalibrationResult calibrate(const std::vector<CalibrationTrace>& traces,
                            const std::vector<NcclTestsTable>& nccl,
                            const CalibrationOptions& options);

/// hardware_to_json(hw) plus the "base" preset under which
/// hardware_from_json(...) gives back exactly `hw` (efficiency entries merge
/// into the base's map, so the base must not add op types hw lacks).
/// `preferred_base` is tried first.
nlohmann::json calibrated_hardware_json(const HardwareModel& hw,
                                        const std::string& preferred_base = "");

nlohmann::json calibration_report_to_json(const CalibrationReport& report);
std::string format_calibration_report(const CalibrationReport& report);

}  // namespace shardscope::sim
