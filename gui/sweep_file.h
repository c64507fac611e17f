// A sweep written by `shardscope sweep --out FILE`: JSON (FILE ending in
// .json: model, hardware, memory limit and every simulated configuration) or
// CSV (every configuration, rejected ones included; no model or hardware, so
// its points cannot be re-simulated from the viewer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "traces/trace.h"

namespace shardscope::gui {

struct SweepFilePoint {
  size_t config = 0;  // position in the file's configurations
  int64_t world = 0;
  nlohmann::json policy;
  bool fits = false;
  bool pareto = false;  // as the sweep computed it (sim/sweep.h), never recomputed here
  // The times and throughput: 0 when the configuration does not fit (the
  // file leaves them null or empty: a step that ran out of memory predicts
  // none; numbers an older file has there are ignored).
  double step_time_ms = 0;
  double tokens_per_s = 0;
  double exposed_comm_ms = 0;
  double overlap = 0;
  // Up to the failure when it does not fit.
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  std::string oom_buffer;
};

struct SweepFile {
  std::string path;
  bool from_json = false;
  std::string model;                   // JSON only
  std::string hw;                      // JSON only
  int64_t memory_limit_bytes = 0;      // JSON only; 0 = unknown
  std::vector<SweepFilePoint> points;  // simulated configurations (CSV: rejected rows dropped)
  int64_t best = -1;                   // index into points; -1 = none
  bool can_simulate() const { return from_json && !model.empty() && !hw.empty(); }
};

// Throws std::runtime_error naming the file and the field (or CSV line and
// column) at fault.
SweepFile load_sweep_file(const std::string& path);
SweepFile parse_sweep_json(const nlohmann::json& doc, const std::string& path);
SweepFile parse_sweep_csv(const std::string& text, const std::string& path);

struct SweepPointSimulation {
  traces::Trace trace;
  // Empty when the step fits; else why it does not (buffer, size, the
  // allocator's message): the trace then stops at the failed allocation.
  std::string does_not_fit;
};

// Simulates one configuration of a JSON sweep as `shardscope simulate` does
// (model, policy, world, hardware and memory limit from the file). Throws
// (plan/sim errors) when it cannot.
SweepPointSimulation simulate_sweep_point(const SweepFile& file, const SweepFilePoint& point);

// Pareto points (as flagged), ordered by peak reserved bytes: the front's polyline.
std::vector<size_t> pareto_order(const SweepFile& file);

}  // namespace shardscope::gui
