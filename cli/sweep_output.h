// `shardscope sweep --out FILE` and `--json`, streamed: the configurations go
// to a temporary file of compact records while the sweep runs, and are
// written out from it once the Pareto front (a column of every row) is known,
// so memory does not grow with the grid. The output is byte for byte that of
// building the whole document and dumping it (docs/sweep.md, "Output files").
#pragma once

#include <cstdio>
#include <functional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/sweep.h"

namespace shardscope::cli {

/// Every configuration of a sweep in a temporary file (tmpfile(3): gone when
/// closed, in /tmp), about 120 bytes each; the policy is not stored but rebuilt from
/// the grid. Throws std::runtime_error when the file cannot be written.
class SweepSpill {
 public:
  SweepSpill();
  ~SweepSpill();
  SweepSpill(const SweepSpill&) = delete;
  SweepSpill& operator=(const SweepSpill&) = delete;

  void add(const sim::SweepPoint& p);
  /// Every configuration in config order, with its policy (sim::grid_policy
  /// of `base`) and its Pareto mark (its config in `front`).
  void replay(const sim::SweepGrid& grid, const nlohmann::json& base, const std::set<size_t>& front,
              const std::function<void(const sim::SweepPoint&)>& each) const;

 private:
  FILE* file_ = nullptr;
};

/// A configuration's value of a grid key, short: strings bare, the rest as JSON.
std::string grid_value(const sim::SweepPoint& p, const std::string& dotted_key);

/// The CSV header (grid keys as columns) and one row per configuration.
void write_csv_header(const sim::SweepGrid& grid, std::ostream& out);
void write_csv_row(const sim::SweepPoint& p, const sim::SweepGrid& grid, std::ostream& out);

/// One entry of the sweep JSON's "configs" (simulated configurations only)
/// and its "baseline".
nlohmann::json config_json(const sim::SweepPoint& p);
nlohmann::json baseline_json(const sim::SweepPoint& b);

/// Writes `head.dump(indent)` with "configs" (which `head` must hold, any
/// value) replaced by the array of what `configs` hands to its callback, in
/// that order, without holding them: the same bytes as dumping the whole
/// document.
void write_json_streamed(
    const nlohmann::json& head, int indent,
    const std::function<void(const std::function<void(const nlohmann::json&)>&)>& configs,
    std::ostream& out);

}  // namespace shardscope::cli
