// Internals of sim/calibrate.cpp shared by its parts (not a public API):
// the samples calibrate collects from traces and the fits it makes of them.
//   calibrate.cpp              reads the traces, fits compute, memory ops,
//                              contention, dispatch and launch overhead
//   calibrate_fits.cpp         least-squares fits (efficiency, curves, memory
//                              ops, latency + bandwidth lines), small helpers
//   calibrate_gaps.cpp         op dispatch gaps and launch deltas of a rank
//   calibrate_collectives.cpp  collective fits (one or two lines) and the
//                              analytical ring refitted from them
// Units: times in ns, sizes in bytes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "plan/policy.h"
#include "plan/schedule.h"
#include "sim/calibrate.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"
#include "traces/trace.h"

namespace shardscope::sim::calibrate_detail {

// Relative residuals (pred - measured) / measured.
struct Residuals {
  double sum2 = 0;
  double max = 0;
  int64_t n = 0;
  void add(double predicted, double measured) {
    if (!(measured > 0)) return;
    const double r = (predicted - measured) / measured;
    sum2 += r * r;
    max = std::max(max, std::fabs(r));
    ++n;
  }
  double rms() const { return n ? std::sqrt(sum2 / static_cast<double>(n)) : 0.0; }
};

// A backward graph op's event by its name: "h.0.mlp.fc1.backward" (the
// engines, engine/exec/schedule_info.cpp) or "h.0.mlp.fc1 bwd" (the simulator).
bool backward_event(std::string_view name);

// A prediction rounded to whole ns, as the simulator rounds durations.
double round_ns(double ns);

// The op kind of a collective event's category; false for other categories.
bool collective_kind(traces::Category c, plan::OpKind* out);

// f of the busbw model: 2 for all-reduce, else 1.
double bus_factor(plan::OpKind kind);

// How one trace's collectives map to process groups (plan/'s layout: shard
// groups of N consecutive ranks, replica groups of the ranks equal mod N).
class GroupLayout {
 public:
  GroupLayout(const std::string& trace, int64_t world) : trace_(trace), world_(world) {}

  void set_override(int64_t g) { override_ = g; }
  void set_policy(const plan::Policy& p) {
    policy_ = true;
    shard_ = p.shard_group_size.value_or(world_);
    if (shard_ < 1 || shard_ > world_ || world_ % shard_ != 0)
      problem_ = "its policy's shard_group_size " + std::to_string(shard_) +
                 " does not divide its world size " + std::to_string(world_);
    const plan::ReshardAfterForward& r = p.reshard_after_forward;
    if (problem_.empty() && r.is_int && r.k > 1 && r.k < shard_)
      problem_ = "its policy has reshard_after_forward=" + std::to_string(r.k) +
                 ": backward all-gathers run over groups of " + std::to_string(r.k) +
                 " ranks, forward ones over " + std::to_string(shard_) +
                 ", and the trace does not tell them apart; calibrate from a trace with "
                 "reshard_after_forward true or false, or force one group size (--group-size)";
  }

  // The ranks of the group `rank`'s collective of `kind` runs over.
  std::vector<int> ranks(plan::OpKind kind, int32_t rank) const {
    if (rank < 0 || (world_ > 0 && rank >= world_ && override_ == 0))
      throw Error("trace " + trace_ + ": rank " + std::to_string(rank) +
                  " is outside its world of " + std::to_string(world_));
    std::vector<int> out;
    if (override_ > 0) {
      // plan/'s layout with N = the override: all-gathers and reduce-scatters
      // over N consecutive ranks, all-reduces (hybrid, DDP) over the ranks
      // equal mod N, which needs the world size.
      if (kind == plan::OpKind::all_reduce) {
        if (world_ <= 0 || world_ % override_ != 0)
          throw Error("trace " + trace_ + ": --group-size " + std::to_string(override_) +
                      ": an all-reduce runs over the ranks equal mod " + std::to_string(override_) +
                      ", which needs a world size it divides (" +
                      (world_ > 0 ? "the trace's is " + std::to_string(world_)
                                  : std::string("the trace gives none")) +
                      ")");
        for (int64_t r = rank % override_; r < world_; r += override_)
          out.push_back(static_cast<int>(r));
        return out;
      }
      const int64_t first = rank / override_ * override_;
      for (int64_t i = 0; i < override_; ++i) out.push_back(static_cast<int>(first + i));
      return out;
    }
    if (!policy_)
      throw Error("trace " + trace_ +
                  ": its metadata carries no policy (policy_json), so the process groups of its "
                  "collectives are unknown; give the group size (--group-size N)");
    if (!problem_.empty()) throw Error("trace " + trace_ + ": " + problem_);
    if (kind == plan::OpKind::all_reduce) {
      for (int64_t r = rank % shard_; r < world_; r += shard_) out.push_back(static_cast<int>(r));
    } else {
      const int64_t first = rank / shard_ * shard_;
      for (int64_t i = 0; i < shard_; ++i) out.push_back(static_cast<int>(first + i));
    }
    return out;
  }

 private:
  std::string trace_;
  int64_t world_ = 0;
  int64_t override_ = 0;
  bool policy_ = false;
  int64_t shard_ = 1;
  std::string problem_;
};

struct Point {
  double x = 0;  // f S (n-1)/n, bytes
  double t = 0;  // ns
  int64_t bytes = 0;
  bool nccl = false;
};

// t = latency + slope x by least squares with weights 1/t^2 (relative
// residuals: sizes span decades); a negative intercept: through the origin
// (latency 0, clamped). Points need t > 0.
struct LineFit {
  double latency = 0;
  double slope = 0;  // ns per byte of x
  bool clamped = false;
};

LineFit fit_line(const std::vector<Point>& pts);

// A collective event of one rank, before matching across ranks.
struct PendingCollective {
  plan::OpKind kind = plan::OpKind::all_gather;
  GroupSpan span;
  int leader = 0;  // lowest rank of its group
  int rank = 0;
  int64_t start = 0, end = 0, bytes = 0;
  int64_t warmup_end = 0;  // its rank's warm-up end: earlier ones fit nothing
};

using Key = std::tuple<int, int64_t, bool>;  // kind, ranks, multi_node

struct KeyData {
  plan::OpKind kind = plan::OpKind::all_gather;
  GroupSpan span;
  std::vector<Point> points;
};

struct ComputeSample {
  double flops = 0;
  double a = 0;    // FLOPs / peak, ns: the compute time at efficiency 1
  double mem = 0;  // bytes / HBM bw, ns
  double d = 0;    // measured duration, ns
};

struct TypeData {
  std::vector<ComputeSample> compute_bound;
  std::vector<ComputeSample> uncontended;  // compute- and memory-bound
  std::vector<ComputeSample> contended;
  int64_t memory_bound = 0;
};

void add_point(std::map<Key, KeyData>& keys, plan::OpKind kind, const GroupSpan& span,
               const Point& p);

std::string fmt(const char* format, double v);

struct MemorySample {
  int64_t bytes = 0;
  double m = 0;  // bytes / HBM bw, ns: the duration at bandwidth efficiency 1
  double d = 0;  // measured duration, ns
};

// t = fixed + m / eff by least squares; one size (or a negative intercept,
// or durations that do not grow with size): fixed 0 and eff alone; eff
// capped at 1.
MemoryOpReport fit_memory_op(const std::string& kind, const std::vector<MemorySample>& samples);

// Least squares of d = a / eff on absolute residuals: eff = sum(a^2) / sum(a d);
// 0 when the samples cannot say (no compute time).
double fit_efficiency(const std::vector<ComputeSample>& samples);

// Efficiency as a function of size: the compute-bound samples binned by
// floor(log2 FLOPs), one least-squares efficiency per bin (capped at 1) at
// the bin's geometric-mean FLOPs. Empty unless at least two bins: one size
// says nothing about the shape of the curve.
std::vector<EfficiencyKnot> fit_efficiency_curve(const std::vector<ComputeSample>& samples);

// Mean of `sorted` (ascending, non-empty) without its largest 1% (n / 100
// values): preemption outliers left out.
double mean_without_top_percent(const std::vector<double>& sorted);

// The gaps DispatchReport describes, of one rank, appended to `gaps` (ns).
void collect_dispatch_gaps(const traces::RankTrace& r, int64_t warmup_end, bool engine_source,
                           std::vector<double>* gaps);
// LaunchReport's deltas of one rank (ns), appended to `deltas`.
void collect_launch_deltas(const traces::RankTrace& r, int64_t warmup_end,
                           std::vector<double>* deltas);

// One fit per (kind, ranks, multi_node) key into hw.collectives and
// rep.collectives (CollectiveReport), with notes; sets *anything when one is
// written.
void fit_collectives(const std::map<Key, KeyData>& keys, const HardwareModel& base,
                     HardwareModel& hw, CalibrationReport& rep, bool* anything);
// The analytical one-node ring from rep.collectives (RingScalingReport).
void fit_ring(const HardwareModel& base, HardwareModel& hw, CalibrationReport& rep);

}  // namespace shardscope::sim::calibrate_detail
