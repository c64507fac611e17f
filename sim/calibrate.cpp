#include "sim/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "plan/error.h"
#include "plan/policy.h"
#include "plan/schedule.h"
#include "sim/cost_model.h"
#include "traces/error.h"
#include "traces/trace_io.h"

namespace shardscope::sim {

namespace {

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
bool backward_event(std::string_view name) {
  const auto ends = [&](std::string_view suffix) {
    return name.size() > suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".backward") || ends(" bwd");
}

double round_ns(double ns) {
  return ns > 0 ? static_cast<double>(std::llround(ns)) : 0.0;
}

bool collective_kind(traces::Category c, plan::OpKind* out) {
  switch (c) {
    case traces::Category::comm_all_gather:
      *out = plan::OpKind::all_gather;
      return true;
    case traces::Category::comm_reduce_scatter:
      *out = plan::OpKind::reduce_scatter;
      return true;
    case traces::Category::comm_all_reduce:
      *out = plan::OpKind::all_reduce;
      return true;
    default:
      return false;
  }
}

double bus_factor(plan::OpKind kind) {
  return kind == plan::OpKind::all_reduce ? 2.0 : 1.0;
}

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
LineFit fit_line(const std::vector<Point>& pts) {
  LineFit f;
  double sw = 0, swx = 0, swt = 0;
  for (const Point& p : pts) {
    const double w = 1.0 / (p.t * p.t);
    sw += w;
    swx += w * p.x;
    swt += w * p.t;
  }
  if (!(sw > 0)) return f;
  const double xm = swx / sw, tm = swt / sw;
  double sxy = 0, sxx = 0;
  for (const Point& p : pts) {
    const double w = 1.0 / (p.t * p.t);
    sxy += w * (p.x - xm) * (p.t - tm);
    sxx += w * (p.x - xm) * (p.x - xm);
  }
  f.slope = sxx > 0 ? sxy / sxx : 0;
  f.latency = tm - f.slope * xm;
  if (f.latency < 0) {
    double sxt = 0, sx2 = 0;
    for (const Point& p : pts) {
      const double w = 1.0 / (p.t * p.t);
      sxt += w * p.x * p.t;
      sx2 += w * p.x * p.x;
    }
    f.latency = 0;
    f.slope = sx2 > 0 ? sxt / sx2 : 0;
    f.clamped = true;
  }
  return f;
}

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
               const Point& p) {
  const Key key{static_cast<int>(kind), span.ranks, span.nodes > 1};
  auto [it, inserted] = keys.try_emplace(key);
  if (inserted) {
    it->second.kind = kind;
    it->second.span = span;
  }
  it->second.points.push_back(p);
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

struct MemorySample {
  int64_t bytes = 0;
  double m = 0;  // bytes / HBM bw, ns: the duration at bandwidth efficiency 1
  double d = 0;  // measured duration, ns
};

// t = fixed + m / eff by least squares; one size (or a negative intercept,
// or durations that do not grow with size): fixed 0 and eff alone; eff
// capped at 1.
MemoryOpReport fit_memory_op(const std::string& kind, const std::vector<MemorySample>& samples) {
  MemoryOpReport r;
  r.kind = kind;
  r.events = static_cast<int64_t>(samples.size());
  std::set<int64_t> sizes;
  double sm = 0, sd = 0, smm = 0, smd = 0;
  for (const MemorySample& s : samples) {
    sizes.insert(s.bytes);
    sm += s.m;
    sd += s.d;
    smm += s.m * s.m;
    smd += s.m * s.d;
  }
  r.distinct_sizes = static_cast<int64_t>(sizes.size());
  const double n = static_cast<double>(samples.size());
  double fixed = 0, slope = 0;
  if (sizes.size() >= 2) {
    const double var = smm - sm * sm / n;
    slope = var > 0 ? (smd - sm * sd / n) / var : 0;
    fixed = (sd - slope * sm) / n;
  }
  if (sizes.size() < 2 || !(slope > 0) || fixed < 0) {
    r.fixed_from_zero = true;
    fixed = 0;
    slope = smm > 0 ? smd / smm : 0;
  }
  if (!(slope > 0)) {  // no bytes: all fixed cost
    slope = 1;
    fixed = sd / n;
    r.fixed_from_zero = false;
  }
  double eff = 1.0 / slope;
  if (eff > 1.0) {
    // Within 0.1% of the roof is the roof (whole-ns durations); beyond it
    // the op ran faster than the base's HBM bandwidth allows: capped, noted.
    r.capped = eff > 1.001;
    eff = 1.0;
  }
  r.fit.fixed_ns = static_cast<int64_t>(std::llround(fixed));
  r.fit.bandwidth_efficiency = eff;
  Residuals res;
  for (const MemorySample& s : samples)
    res.add(round_ns(static_cast<double>(r.fit.fixed_ns) + s.m / eff), s.d);
  r.rms_rel_residual = res.rms();
  r.max_rel_residual = res.max;
  return r;
}

// Least squares of d = a / eff on absolute residuals: eff = sum(a^2) / sum(a d);
// 0 when the samples cannot say (no compute time).
double fit_efficiency(const std::vector<ComputeSample>& samples) {
  double sad = 0, saa = 0;
  for (const ComputeSample& s : samples) {
    sad += s.a * s.d;
    saa += s.a * s.a;
  }
  return saa > 0 && sad > 0 ? saa / sad : 0.0;
}

// Efficiency as a function of size: the compute-bound samples binned by
// floor(log2 FLOPs), one least-squares efficiency per bin (capped at 1) at
// the bin's geometric-mean FLOPs. Empty unless at least two bins: one size
// says nothing about the shape of the curve.
std::vector<EfficiencyKnot> fit_efficiency_curve(const std::vector<ComputeSample>& samples) {
  std::map<int, std::vector<ComputeSample>> bins;
  for (const ComputeSample& s : samples)
    if (s.flops > 0) bins[static_cast<int>(std::floor(std::log2(s.flops)))].push_back(s);
  std::vector<EfficiencyKnot> knots;
  if (bins.size() < 2) return knots;
  for (const auto& [bin, in_bin] : bins) {
    const double eff = fit_efficiency(in_bin);
    if (!(eff > 0)) continue;
    double log_sum = 0;
    for (const ComputeSample& s : in_bin) log_sum += std::log(s.flops);
    knots.push_back({std::exp(log_sum / static_cast<double>(in_bin.size())), std::min(eff, 1.0)});
  }
  if (knots.size() < 2) knots.clear();
  // A flat curve is one efficiency: knots within 2% of the overall fit are
  // noise (whole-ns rounding, jitter), not a size dependence.
  const double overall = std::min(fit_efficiency(samples), 1.0);
  bool flat = true;
  for (const EfficiencyKnot& k : knots)
    flat = flat && std::fabs(k.efficiency - overall) <= 0.02 * overall;
  if (flat) knots.clear();
  return knots;
}

}  // namespace

// LaunchReport's deltas of one rank (ns): consecutive host-lane events that
// are both launches (a correlation id), after the warm-up.
void collect_launch_deltas(const traces::RankTrace& r, int64_t warmup_end,
                           std::vector<double>* deltas) {
  std::vector<const traces::Event*> host;
  for (const traces::Event& e : r.events)
    if (e.lane < r.lanes.size() && r.lanes[e.lane].kind == traces::LaneKind::host &&
        e.category != traces::Category::marker)
      host.push_back(&e);
  std::sort(host.begin(), host.end(), [](const traces::Event* a, const traces::Event* b) {
    return a->start_ns < b->start_ns;
  });
  for (size_t i = 1; i < host.size(); ++i) {
    const traces::Event& a = *host[i - 1];
    const traces::Event& b = *host[i];
    if (a.start_ns < warmup_end || a.correlation == 0 || b.correlation == 0 ||
        a.category != traces::Category::host || b.category != traces::Category::host)
      continue;
    deltas->push_back(static_cast<double>(b.start_ns - a.start_ns));
  }
}

// The gaps DispatchReport describes, of one rank, appended to `gaps` (ns).
void collect_dispatch_gaps(const traces::RankTrace& r, int64_t warmup_end, bool engine_source,
                           std::vector<double>* gaps) {
  // When the launch of each device event ended: the host-lane event with
  // its correlation id (a runtime launch call; Kineto's and the engines'
  // traces carry them), else unknown, and an op whose launch is unknown
  // says nothing (the host may have launched it late).
  std::unordered_map<uint32_t, int64_t> launch_by_correlation;
  for (const traces::Event& e : r.events)
    if (e.correlation != 0 && e.lane < r.lanes.size() &&
        r.lanes[e.lane].kind == traces::LaneKind::host)
      launch_by_correlation[e.correlation] = e.start_ns + e.dur_ns;
  // Without launch events: an engine's host runs ahead of its streams (it
  // launches and waits only where the schedule says), so its ops count as
  // launched; any other source's (a simulator's) gaps say nothing.
  if (launch_by_correlation.empty() && !engine_source) return;
  std::vector<int64_t> launch_end(r.events.size(), launch_by_correlation.empty()
                                                       ? std::numeric_limits<int64_t>::min()
                                                       : std::numeric_limits<int64_t>::max());
  for (size_t i = 0; i < r.events.size(); ++i) {
    const traces::Event& e = r.events[i];
    if (e.correlation == 0 || e.lane >= r.lanes.size() ||
        r.lanes[e.lane].kind == traces::LaneKind::host)
      continue;
    const auto it = launch_by_correlation.find(e.correlation);
    if (it != launch_by_correlation.end()) launch_end[i] = it->second;
  }
  const auto device = [&](const traces::Event& e) {
    if (e.lane >= r.lanes.size() || r.lanes[e.lane].kind == traces::LaneKind::host) return false;
    return e.category != traces::Category::marker && e.category != traces::Category::host &&
           e.category != traces::Category::sync;
  };
  // Device events by lane, in start order; every device end, sorted.
  std::map<uint32_t, std::vector<size_t>> by_lane;
  std::vector<std::pair<int64_t, uint32_t>> ends;  // end, lane
  for (size_t i = 0; i < r.events.size(); ++i) {
    const traces::Event& e = r.events[i];
    if (!device(e)) continue;
    by_lane[e.lane].push_back(i);
    ends.emplace_back(e.start_ns + e.dur_ns, e.lane);
  }
  std::sort(ends.begin(), ends.end());
  for (auto& [lane, idx] : by_lane) {
    if (r.lanes[lane].kind == traces::LaneKind::comm) continue;
    std::sort(idx.begin(), idx.end(),
              [&](size_t a, size_t b) { return r.events[a].start_ns < r.events[b].start_ns; });
    for (size_t k = 1; k < idx.size(); ++k) {
      const traces::Event& a = r.events[idx[k - 1]];
      const traces::Event& b = r.events[idx[k]];
      if (a.start_ns < warmup_end || traces::is_comm(b.category) || traces::is_comm(a.category))
        continue;
      const int64_t a_end = a.start_ns + a.dur_ns;
      if (b.start_ns < a_end || launch_end[idx[k]] > a_end) continue;
      // Another lane's event ending in (a_end, b.start]: b may have waited for it.
      auto it = std::upper_bound(ends.begin(), ends.end(),
                                 std::make_pair(a_end, std::numeric_limits<uint32_t>::max()));
      bool waited = false;
      for (; it != ends.end() && it->first <= b.start_ns; ++it)
        if (it->second != lane) {
          waited = true;
          break;
        }
      if (!waited) gaps->push_back(static_cast<double>(b.start_ns - a_end));
    }
  }
}

traces::Trace load_calibration_trace(const std::string& path) {
  try {
    return traces::load_trace(path);
  } catch (const traces::TraceError& e) {
    throw Error("trace " + path + ": " + e.what());
  }
}

CalibrationResult calibrate(const std::vector<CalibrationTrace>& traces,
                            const std::vector<NcclTestsTable>& nccl,
                            const CalibrationOptions& options) {
  const HardwareModel& base = options.base;
  base.validate();
  if (traces.empty() && nccl.empty()) throw Error("calibrate: no traces and no nccl-tests tables");
  if (options.group_size < 0) throw Error("calibrate: group size must be >= 1");
  if (!(options.memory_bound_fraction > 0 && options.memory_bound_fraction <= 1))
    throw Error("calibrate: memory_bound_fraction must be in (0, 1]");

  CalibrationResult result;
  CalibrationReport& rep = result.report;
  rep.name = options.name;
  rep.base = base.name;

  // Compute samples per (op type, compute dtype): an efficiency is fitted
  // for the dtype its events ran in and applies to that dtype only.
  std::map<std::pair<std::string, plan::DType>, TypeData> types;
  std::map<std::string, std::vector<MemorySample>> memory_samples;  // by op kind name
  std::map<Key, KeyData> keys;
  int64_t scalar_all_reduces = 0, one_rank = 0, other_comm = 0, zero_duration = 0;
  std::vector<double> dispatch_gaps;  // ns
  std::vector<double> launch_deltas;  // ns

  for (const CalibrationTrace& in : traces) {
    if (!in.trace) throw Error("calibrate: trace " + in.name + " is null");
    const traces::Trace& t = *in.trace;
    rep.traces.push_back(in.name);
    const int64_t world = t.world_size();
    GroupLayout layout(in.name, world);
    plan::DType dtype = plan::DType::f32;
    std::string dtype_from = "no policy in the metadata: fp32";
    if (!t.meta.policy_json.empty()) {
      plan::Policy policy;
      try {
        policy = plan::policy_from_json(nlohmann::json::parse(t.meta.policy_json));
      } catch (const nlohmann::json::exception& e) {
        throw Error("trace " + in.name +
                    ": its metadata policy_json is not valid JSON: " + e.what());
      } catch (const plan::Error& e) {
        throw Error("trace " + in.name + ": its metadata policy: " + e.what());
      }
      if (policy.world_size && *policy.world_size != world)
        throw Error("trace " + in.name + ": its policy says world_size " +
                    std::to_string(*policy.world_size) + " but the trace has " +
                    std::to_string(world));
      layout.set_policy(policy);
      dtype = policy.mixed_precision.param_dtype;
      dtype_from = std::string("policy param_dtype ") + plan::dtype_name(dtype);
    }
    if (options.dtype) {
      dtype = *options.dtype;
      dtype_from = std::string("--dtype ") + plan::dtype_name(dtype);
    }
    if (options.group_size > 0) layout.set_override(options.group_size);
    const double peak = base.peak_flops(dtype);

    int64_t usable = 0;
    // This trace's collectives, matched across ranks after the rank loop.
    std::vector<PendingCollective> pending, rank_collectives;
    std::map<std::tuple<int, int, int64_t>, std::vector<size_t>> instances;
    for (const traces::RankTrace& r : t.ranks) {
      // With two steps or more, what starts before the second one is warm-up
      // (first calls, cuBLAS and NCCL set-up, first allocations: on the H200
      // a first GEMM took 65 ms instead of 52 us) and fits nothing, as
      // `report` leaves the first step out.
      const int64_t warmup_end =
          r.steps.size() >= 2 ? r.steps[1].start_ns : std::numeric_limits<int64_t>::min();
      // This rank's collectives: intervals for the contention test.
      std::vector<int64_t> starts, ends;
      std::vector<std::pair<int64_t, int64_t>> intervals;
      for (const traces::Event& e : r.events) {
        if (!traces::is_comm(e.category)) continue;
        intervals.emplace_back(e.start_ns, e.start_ns + e.dur_ns);
        ++rep.collective_events;
        // Warm-up and zero-length collectives fit nothing but keep their
        // place in the sequence that matches instances across ranks.
        const bool warmup = e.start_ns < warmup_end;
        if (warmup) ++rep.collectives_warmup;
        plan::OpKind kind;
        if (!collective_kind(e.category, &kind)) {
          if (!warmup) ++other_comm;
          continue;
        }
        if (kind == plan::OpKind::all_reduce && e.bytes <= 8 && e.unit == traces::kNoString) {
          // clip_grad_norm's / GradScaler's scalar all-reduce: another group
          // than the gradients' (shard group, world).
          if (!warmup) ++scalar_all_reduces;
          continue;
        }
        const std::vector<int> group = layout.ranks(kind, r.rank);
        const GroupSpan span = group_span(group, base.gpus_per_node);
        if (span.ranks < 2) {
          if (!warmup) ++one_rank;
          continue;
        }
        if (!warmup && e.dur_ns <= 0) ++zero_duration;
        PendingCollective pc;
        pc.kind = kind;
        pc.span = span;
        pc.leader = *std::min_element(group.begin(), group.end());
        pc.rank = r.rank;
        pc.start = e.start_ns;
        pc.end = e.start_ns + e.dur_ns;
        pc.bytes = static_cast<int64_t>(e.bytes);
        pc.warmup_end = warmup_end;
        rank_collectives.push_back(pc);
        if (!warmup && e.dur_ns > 0) ++usable;
      }
      // Instances: the k-th collective of a kind over a group on this rank
      // is the k-th on every member (they issue the same sequence).
      std::sort(
          rank_collectives.begin(), rank_collectives.end(),
          [](const PendingCollective& a, const PendingCollective& b) { return a.start < b.start; });
      std::map<std::pair<int, int>, int64_t> ordinal;
      for (const PendingCollective& pc : rank_collectives) {
        const int64_t k = ordinal[{static_cast<int>(pc.kind), pc.leader}]++;
        instances[{static_cast<int>(pc.kind), pc.leader, k}].push_back(pending.size());
        pending.push_back(pc);
      }
      rank_collectives.clear();
      std::sort(intervals.begin(), intervals.end());
      std::vector<int64_t> prefix_max_end;
      for (const auto& [s, e] : intervals) {
        starts.push_back(s);
        ends.push_back(e);
        prefix_max_end.push_back(prefix_max_end.empty() ? e : std::max(prefix_max_end.back(), e));
      }
      std::vector<int64_t> sorted_ends = ends;
      std::sort(sorted_ends.begin(), sorted_ends.end());
      // Where a compute start lies against this rank's collectives:
      // contended (one started before and ends after it), at a boundary (it
      // started exactly as one started or ended: running or not is a matter
      // of event order), or clear.
      enum class Overlap { clear, contended, boundary };
      const auto overlap = [&](int64_t start) {
        const size_t before = static_cast<size_t>(
            std::lower_bound(starts.begin(), starts.end(), start) - starts.begin());
        if (before > 0 && prefix_max_end[before - 1] > start) return Overlap::contended;
        if (std::binary_search(starts.begin(), starts.end(), start) ||
            std::binary_search(sorted_ends.begin(), sorted_ends.end(), start))
          return Overlap::boundary;
        return Overlap::clear;
      };

      collect_dispatch_gaps(r, warmup_end,
                            t.meta.source == traces::Source::engine_cpu ||
                                t.meta.source == traces::Source::engine_cuda,
                            &dispatch_gaps);
      collect_launch_deltas(r, warmup_end, &launch_deltas);

      for (const traces::Event& e : r.events) {
        if (!traces::is_compute(e.category)) continue;
        ++rep.compute_events;
        if (e.flops == 0) {
          ++rep.compute_without_flops;
          // A plan op kind without FLOPs: its bytes fit a memory-op cost
          // when uncontended (contended or at a boundary: not used).
          const std::string kind(e.op != traces::kNoString ? t.str(e.op) : "");
          if (e.dur_ns <= 0 || e.start_ns < warmup_end || !is_memory_op_kind(kind) ||
              overlap(e.start_ns) != Overlap::clear)
            continue;
          MemorySample m;
          m.bytes = static_cast<int64_t>(e.bytes);
          m.m = static_cast<double>(e.bytes) / base.hbm_bytes_per_s * 1e9;
          m.d = static_cast<double>(e.dur_ns);
          memory_samples[kind].push_back(m);
          continue;
        }
        if (e.dur_ns <= 0) {
          ++zero_duration;
          continue;
        }
        if (e.start_ns < warmup_end) {
          ++rep.compute_warmup;
          continue;
        }
        const Overlap where = overlap(e.start_ns);
        if (where == Overlap::boundary) {
          ++rep.compute_at_boundary;
          continue;
        }
        const bool contended = where == Overlap::contended;
        const std::string op_name(e.op != traces::kNoString ? t.str(e.op) : t.str(e.name));
        // Backward ops fit their own efficiency (efficiency_key) when the
        // trace says which they are: the engine names them "OP.backward",
        // the simulator "OP bwd". Recompute is forward work.
        const std::string type = is_graph_op_type(op_name)
                                     ? efficiency_key(op_name, backward_event(t.str(e.name)))
                                     : op_name;
        ComputeSample s;
        s.flops = static_cast<double>(e.flops);
        s.a = static_cast<double>(e.flops) / peak * 1e9;
        s.mem = static_cast<double>(e.bytes) / base.hbm_bytes_per_s * 1e9;
        s.d = static_cast<double>(e.dur_ns);
        TypeData& td = types[{type, dtype}];
        ++usable;
        if (contended) {
          td.contended.push_back(s);
          continue;
        }
        td.uncontended.push_back(s);
        // Durations are whole nanoseconds: a roof within half a nanosecond of
        // the fraction is the roof (a 40 ns memory-bound op rounded from
        // 39.5 ns is not 1.25% compute-bound).
        if (s.mem + 0.5 >= options.memory_bound_fraction * s.d)
          ++td.memory_bound;
        else
          td.compute_bound.push_back(s);
      }
    }
    // A collective's transfer starts when the last rank of its group
    // arrives: with every member in the trace (and its ends after that
    // arrival), each member's point is its end minus that arrival; earlier
    // ranks' waiting is not transfer time. Otherwise (one rank of the world,
    // misaligned clocks) the recorded duration.
    for (const auto& [key, members] : instances) {
      const PendingCollective& first = pending[members.front()];
      int64_t last_arrival = std::numeric_limits<int64_t>::min();
      std::set<int> ranks;
      for (size_t i : members) {
        last_arrival = std::max(last_arrival, pending[i].start);
        ranks.insert(pending[i].rank);
      }
      bool matched = static_cast<int64_t>(members.size()) == first.span.ranks &&
                     static_cast<int64_t>(ranks.size()) == first.span.ranks;
      for (size_t i : members) matched = matched && pending[i].end > last_arrival;
      if (matched) ++rep.collectives_matched;
      for (size_t i : members) {
        const PendingCollective& pc = pending[i];
        if (pc.start < pc.warmup_end || pc.end <= pc.start) continue;
        const double n = static_cast<double>(pc.span.ranks);
        Point p;
        p.bytes = pc.bytes;
        p.x = bus_factor(pc.kind) * static_cast<double>(pc.bytes) * (n - 1) / n;
        p.t = static_cast<double>(matched ? pc.end - last_arrival : pc.end - pc.start);
        add_point(keys, pc.kind, pc.span, p);
      }
    }
    if (usable == 0)
      throw Error("trace " + in.name +
                  ": no compute events with FLOPs and no collectives: nothing to calibrate from");
    rep.notes.push_back("trace " + in.name + ": compute dtype from " + dtype_from);
  }

  for (const NcclTestsTable& table : nccl) {
    const std::string where = table.file + ":" + std::to_string(table.line);
    plan::OpKind kind = plan::OpKind::all_gather;
    switch (table.collective) {
      case NcclCollective::all_gather:
        kind = plan::OpKind::all_gather;
        break;
      case NcclCollective::reduce_scatter:
        kind = plan::OpKind::reduce_scatter;
        break;
      case NcclCollective::all_reduce:
        kind = plan::OpKind::all_reduce;
        break;
      default:
        rep.notes.push_back(where + ": " + (table.test.empty() ? "this test" : table.test) +
                            " is not all_gather, reduce_scatter or all_reduce: skipped");
        continue;
    }
    rep.nccl_tables.push_back(where + " (" + nccl_collective_name(table.collective) + ", " +
                              std::to_string(table.ranks) + " ranks on " +
                              std::to_string(table.nodes) + " node(s))");
    if (table.ranks < 2) {
      rep.notes.push_back(where + ": one rank: a collective over one rank costs nothing; skipped");
      continue;
    }
    GroupSpan span;
    span.ranks = table.ranks;
    span.nodes = table.nodes;
    span.min_per_node = table.min_per_node;
    span.max_per_node = table.max_per_node;
    const double n = static_cast<double>(table.ranks);
    for (const NcclTestsRow& row : table.rows) {
      if (!(row.time_us > 0)) continue;
      Point p;
      p.bytes = row.bytes;
      p.x = bus_factor(kind) * static_cast<double>(row.bytes) * (n - 1) / n;
      p.t = row.time_us * 1e3;
      p.nccl = true;
      add_point(keys, kind, span, p);
    }
  }

  HardwareModel hw = base;
  hw.name = options.name;
  bool anything = false;

  // Efficiency per op type: least squares of d = a / eff over the
  // compute-bound events (absolute residuals: long ops weigh most).
  std::vector<std::string> kept, not_op_types;
  for (auto& [key, td] : types) {
    const auto& [type, dtype] = key;
    EfficiencyReport er;
    er.op_type = type;
    er.dtype = dtype;
    er.events = static_cast<int64_t>(td.compute_bound.size());
    er.memory_bound = td.memory_bound;
    er.contended = static_cast<int64_t>(td.contended.size());
    er.base_efficiency = base.efficiency_of(type, dtype);
    er.efficiency = er.base_efficiency;
    double eff = fit_efficiency(td.compute_bound);
    if (eff > 0) {
      if (eff > 1.0) {
        eff = 1.0;
        er.clamped = true;
        rep.notes.push_back("op type " + type + " (" + plan::dtype_name(dtype) +
                            "): fitted efficiency above 1 (faster than the base's peak): capped "
                            "at 1");
      }
      er.efficiency = eff;
      er.fitted = true;
      er.curve = fit_efficiency_curve(td.compute_bound);
      // Only graph op types reach the model: the simulator prices graph ops
      // by type; other names (a Kineto kernel's) are reported, not written.
      er.written = is_efficiency_key(type);
      if (er.written) {
        hw.dtype_efficiency[dtype][type] = eff;
        // A base curve (a preset's published one) would take precedence
        // over the fitted scalar: the fit replaces it.
        if (!er.curve.empty())
          hw.efficiency_curves[dtype][type] = er.curve;
        else if (hw.efficiency_curves.count(dtype))
          hw.efficiency_curves[dtype].erase(type);
        anything = true;
      } else {
        not_op_types.push_back(type);
      }
    } else if (!td.uncontended.empty() || !td.contended.empty()) {
      kept.push_back(type + " (" + plan::dtype_name(dtype) + ")");
    }
    Residuals res;
    for (const ComputeSample& s : td.uncontended) {
      const double eff_at = er.written ? hw.efficiency_of(type, dtype, s.flops) : er.efficiency;
      res.add(round_ns(std::max(s.a / eff_at, s.mem)), s.d);
    }
    er.rms_rel_residual = res.rms();
    er.max_rel_residual = res.max;
    rep.efficiency.push_back(er);
  }
  // A direction without a fit (no compute-bound event, or no event) takes
  // the other direction's fit for that dtype, not the base's (one measured
  // kernel family says more than a preset): its key gets the other's
  // efficiency (and curve) written for that dtype.
  {
    std::map<std::pair<std::string, plan::DType>, const EfficiencyReport*> fitted;
    for (const EfficiencyReport& er : rep.efficiency)
      if (er.written) fitted[{er.op_type, er.dtype}] = &er;
    for (const auto& [key, er] : fitted) {
      const auto& [type, dtype] = key;
      const bool backward = !is_graph_op_type(type);
      const std::string forward_type =
          backward ? type.substr(0, type.size() - std::string(".backward").size()) : type;
      const std::string missing = backward ? forward_type : efficiency_key(forward_type, true);
      if (fitted.count({missing, dtype})) continue;
      hw.dtype_efficiency[dtype][missing] = er->efficiency;
      if (!er->curve.empty())
        hw.efficiency_curves[dtype][missing] = er->curve;
      else if (hw.efficiency_curves.count(dtype))
        hw.efficiency_curves[dtype].erase(missing);
      const std::string label = missing + " (" + plan::dtype_name(dtype) + ")";
      kept.erase(std::remove(kept.begin(), kept.end(), label), kept.end());
      rep.notes.push_back(label + ": no fit of its own; takes " + type + "'s");
    }
  }
  if (!not_op_types.empty())
    rep.notes.push_back(std::to_string(not_op_types.size()) +
                        " fitted name(s) are not graph op types (e.g. '" + not_op_types.front() +
                        "'): reported, not written to the model, which prices graph op types "
                        "only");
  if (!kept.empty()) {
    std::string list;
    for (const std::string& k : kept) list += (list.empty() ? "" : ", ") + k;
    rep.notes.push_back("no compute-bound event (all memory-bound or overlapped) for: " + list +
                        "; their efficiency is the base's");
  }

  for (const auto& [kind, samples] : memory_samples) {
    const MemoryOpReport mr = fit_memory_op(kind, samples);
    hw.memory_ops[kind] = mr.fit;
    if (mr.capped)
      rep.notes.push_back(
          "op kind " + kind +
          ": faster than the base's HBM bandwidth: bandwidth efficiency capped at 1");
    rep.memory_ops.push_back(mr);
    anything = true;
  }

  // Contention: least squares of d = factor x p over the overlapped events,
  // p the uncontended prediction with the fitted efficiencies.
  {
    ContentionReport& cr = rep.contention;
    cr.base_factor = base.contention_factor;
    cr.factor = base.contention_factor;
    std::vector<std::pair<double, double>> pd;  // p, d
    for (const auto& [key, td] : types) {
      if (!is_efficiency_key(key.first)) continue;  // not in the model: says nothing of it
      for (const ComputeSample& s : td.contended) {
        const double eff = hw.efficiency_of(key.first, key.second, s.flops);
        const double p = round_ns(std::max(s.a / eff, s.mem));
        if (p > 0) pd.emplace_back(p, s.d);
      }
    }
    double spd = 0, spp = 0;
    for (const auto& [p, d] : pd) {
      spd += p * d;
      spp += p * p;
    }
    cr.events = static_cast<int64_t>(pd.size());
    if (spp > 0) {
      double f = spd / spp;
      if (f < 1.0) {
        f = 1.0;
        cr.clamped = true;
        rep.notes.push_back(
            "contention: overlapped compute ran faster than predicted uncontended; factor set "
            "to 1");
      }
      cr.factor = f;
      cr.fitted = true;
      hw.contention_factor = f;
      anything = true;
      Residuals res;
      for (const auto& [p, d] : pd) res.add(round_ns(p * f), d);
      cr.rms_rel_residual = res.rms();
      cr.max_rel_residual = res.max;
    } else {
      rep.notes.push_back(
          "contention: no compute event with FLOPs started while a collective ran; the base's "
          "factor " +
          fmt("%g", base.contention_factor) + " is kept");
    }
  }

  // Dispatch: the mean qualifying gap (what a step's sum of gaps grows
  // with; the largest 1%, preemption, left out).
  {
    DispatchReport& dr = rep.dispatch;
    dr.base_ns = base.op_dispatch_ns;
    dr.ns = base.op_dispatch_ns;
    dr.gaps = static_cast<int64_t>(dispatch_gaps.size());
    if (!dispatch_gaps.empty()) {
      std::sort(dispatch_gaps.begin(), dispatch_gaps.end());
      const auto at = [&](double q) {
        return dispatch_gaps[static_cast<size_t>(q *
                                                 static_cast<double>(dispatch_gaps.size() - 1))];
      };
      // The largest 1% (n / 100 of them) left out.
      const size_t kept_gaps = dispatch_gaps.size() - dispatch_gaps.size() / 100;
      double sum = 0;
      for (size_t i = 0; i < kept_gaps; ++i) sum += dispatch_gaps[i];
      dr.ns = static_cast<int64_t>(std::llround(sum / static_cast<double>(kept_gaps)));
      dr.p10_ns = at(0.1);
      dr.p90_ns = at(0.9);
      dr.fitted = true;
      hw.op_dispatch_ns = dr.ns;
      anything = true;
    } else {
      rep.notes.push_back(
          "op dispatch: no gap between two device ops of a lane where the second was ready; the "
          "base's " +
          std::to_string(base.op_dispatch_ns) + " ns is kept");
    }
  }

  // Launch overhead: the mean host time from one launch to the next when
  // nothing else (a wait, an allocator sync) came between (largest 1% out).
  {
    LaunchReport& lr = rep.launch;
    lr.base_ns = base.launch_overhead_ns;
    lr.ns = base.launch_overhead_ns;
    lr.launches = static_cast<int64_t>(launch_deltas.size());
    if (!launch_deltas.empty()) {
      std::sort(launch_deltas.begin(), launch_deltas.end());
      const size_t kept_deltas = launch_deltas.size() - launch_deltas.size() / 100;
      double sum = 0;
      for (size_t i = 0; i < kept_deltas; ++i) sum += launch_deltas[i];
      lr.ns = static_cast<int64_t>(std::llround(sum / static_cast<double>(kept_deltas)));
      lr.fitted = true;
      hw.launch_overhead_ns = lr.ns;
      anything = true;
    } else {
      rep.notes.push_back(
          "launch overhead: no two consecutive launches on a host lane; the base's " +
          std::to_string(base.launch_overhead_ns) + " ns is kept");
    }
  }

  // Collectives: t = latency + x / busbw, least squares with weights 1/t^2
  // (relative residuals: sizes span decades).
  for (auto& [key, kd] : keys) {
    CollectiveReport cr;
    cr.fit.kind = kd.kind;
    cr.fit.ranks = kd.span.ranks;
    cr.fit.multi_node = kd.span.nodes > 1;
    std::vector<Point> pts;
    for (const Point& p : kd.points)
      if (p.t > 0) pts.push_back(p);
    cr.points = static_cast<int64_t>(pts.size());
    std::set<int64_t> sizes;
    for (const Point& p : pts) {
      sizes.insert(p.bytes);
      (p.nccl ? cr.nccl_points : cr.trace_points) += 1;
    }
    cr.distinct_sizes = static_cast<int64_t>(sizes.size());
    const std::string what = std::string(plan::op_kind_name(kd.kind)) + " over " +
                             std::to_string(kd.span.ranks) + " ranks" +
                             (cr.fit.multi_node ? " (multi-node)" : " (one node)");
    if (pts.empty()) continue;
    double latency = 0, slope = 0;
    if (sizes.size() == 1) {
      latency = static_cast<double>(collective_time(base, kd.kind, 0.0, kd.span).ns);
      double sx = 0, sxx = 0;
      for (const Point& p : pts) {
        sx += p.x * (p.t - latency);
        sxx += p.x * p.x;
      }
      slope = sxx > 0 ? sx / sxx : 0;
      cr.latency_from_base = true;
      rep.notes.push_back(what + ": one message size (" + std::to_string(*sizes.begin()) +
                          " B) cannot separate latency from bandwidth: kept the base model's "
                          "latency " +
                          fmt("%.0f ns", latency) + " and fitted the bandwidth");
    } else {
      const LineFit line = fit_line(pts);
      latency = line.latency;
      slope = line.slope;
      if (line.clamped) {
        cr.latency_clamped = true;
        rep.notes.push_back(what + ": the fitted latency was negative; set to 0");
      }
    }
    if (!(slope > 0) || !std::isfinite(slope)) {
      rep.notes.push_back(what + ": durations do not grow with the message size; no fit (the " +
                          "base model is kept for this case)");
      continue;
    }
    cr.fit.latency_ns = std::llround(latency);
    cr.fit.bus_bytes_per_s = 1e9 / slope;
    // Two lines (NCCL's protocol changes with size) when one is poor: the
    // split between consecutive sizes, each side with two sizes or more,
    // that leaves the least rms relative residual; taken when it at least
    // halves the one-line rms and lowers it by a point or more.
    const auto residuals = [&](const CollectiveFit& f) {
      Residuals res;
      for (const Point& p : pts) {
        const bool small = f.small_max_bytes > 0 && p.bytes <= f.small_max_bytes;
        const double lat = static_cast<double>(small ? f.small_latency_ns : f.latency_ns);
        const double bw = small ? f.small_bus_bytes_per_s : f.bus_bytes_per_s;
        res.add(lat + round_ns(p.x * 1e9 / bw), p.t);
      }
      return res;
    };
    const double one_line = residuals(cr.fit).rms();
    if (sizes.size() >= 4) {
      std::vector<int64_t> sorted(sizes.begin(), sizes.end());
      CollectiveFit best = cr.fit;
      double best_rms = one_line;
      for (size_t k = 2; k + 2 <= sorted.size(); ++k) {
        const int64_t cut = sorted[k - 1];  // small: bytes <= cut
        std::vector<Point> lo, hi;
        for (const Point& p : pts) (p.bytes <= cut ? lo : hi).push_back(p);
        const LineFit a = fit_line(lo), b = fit_line(hi);
        if (!(a.slope > 0) || !(b.slope > 0) || !std::isfinite(a.slope) || !std::isfinite(b.slope))
          continue;
        CollectiveFit f = cr.fit;
        f.latency_ns = std::llround(b.latency);
        f.bus_bytes_per_s = 1e9 / b.slope;
        f.small_max_bytes = cut;
        f.small_latency_ns = std::llround(a.latency);
        f.small_bus_bytes_per_s = 1e9 / a.slope;
        const double rms = residuals(f).rms();
        if (rms < best_rms) {
          best_rms = rms;
          best = f;
        }
      }
      if (best.small_max_bytes > 0 && best_rms <= 0.5 * one_line && one_line - best_rms >= 0.01) {
        cr.fit = best;
        rep.notes.push_back(what + ": two lines (protocol change by size) at " +
                            std::to_string(best.small_max_bytes) + " B: rms " +
                            fmt("%.1f%%", 100 * one_line) + " -> " + fmt("%.1f%%", 100 * best_rms));
      }
    }
    const Residuals res = residuals(cr.fit);
    cr.rms_rel_residual = res.rms();
    cr.max_rel_residual = res.max;
    bool replaced = false;
    for (CollectiveFit& f : hw.collectives)
      if (f.kind == cr.fit.kind && f.ranks == cr.fit.ranks && f.multi_node == cr.fit.multi_node) {
        f = cr.fit;
        replaced = true;
      }
    if (!replaced) hw.collectives.push_back(cr.fit);
    rep.collectives.push_back(cr);
    anything = true;
  }

  // The analytical ring from the one-node fits (RingScalingReport).
  {
    RingScalingReport& rr = rep.ring;
    double points = 0, inv_bw = 0;              // busbw: points-weighted harmonic mean
    std::vector<std::pair<double, double>> xy;  // f (n-1), latency ns
    for (const CollectiveReport& cr : rep.collectives) {
      if (cr.fit.multi_node) continue;
      ++rr.fits;
      points += static_cast<double>(cr.points);
      inv_bw += static_cast<double>(cr.points) / cr.fit.bus_bytes_per_s;
      if (!cr.latency_from_base)
        xy.emplace_back(bus_factor(cr.fit.kind) * static_cast<double>(cr.fit.ranks - 1),
                        static_cast<double>(cr.fit.latency_ns));
    }
    if (rr.fits > 0 && points > 0) {
      rr.bus_bytes_per_s = points / inv_bw;
      double hop = static_cast<double>(base.nvlink_latency_ns), c = -1;
      std::set<double> xs;
      for (const auto& [x, y] : xy) xs.insert(x);
      if (xs.size() >= 2) {
        double sx = 0, sy = 0;
        for (const auto& [x, y] : xy) {
          sx += x;
          sy += y;
        }
        const double n = static_cast<double>(xy.size()), xm = sx / n, ym = sy / n;
        double sxy = 0, sxx = 0;
        for (const auto& [x, y] : xy) {
          sxy += (x - xm) * (y - ym);
          sxx += (x - xm) * (x - xm);
        }
        hop = std::max(0.0, sxy / sxx);
        c = ym - hop * xm;
        if (c < 0) {  // through the origin
          double sxy0 = 0, sxx0 = 0;
          for (const auto& [x, y] : xy) {
            sxy0 += x * y;
            sxx0 += x * x;
          }
          c = 0;
          hop = sxy0 / sxx0;
        }
      } else if (!xy.empty()) {
        rr.hop_from_base = true;
        double sy = 0, sx = 0;
        for (const auto& [x, y] : xy) {
          sx += x;
          sy += y;
        }
        c = std::max(0.0, (sy - hop * sx) / static_cast<double>(xy.size()));
      } else {
        rr.hop_from_base = true;
        c = static_cast<double>(base.collective_latency_ns);
      }
      rr.hop_ns = std::llround(hop);
      rr.collective_latency_ns = std::llround(c);
      rr.fitted = true;
      hw.nvlink_bus_bytes_per_s = rr.bus_bytes_per_s;
      hw.nvlink_latency_ns = rr.hop_ns;
      hw.collective_latency_ns = rr.collective_latency_ns;
    }
  }

  if (rep.compute_without_flops > 0)
    rep.notes.push_back(std::to_string(rep.compute_without_flops) +
                        " compute event(s) without FLOPs (non-graph ops, kernels without "
                        "counts) say nothing about efficiency; those of plan op kinds (casts, "
                        "copies, optimizer...) fit the memory-op costs when uncontended");
  if (rep.compute_warmup + rep.collectives_warmup > 0)
    rep.notes.push_back(std::to_string(rep.compute_warmup) + " compute event(s) and " +
                        std::to_string(rep.collectives_warmup) +
                        " collective(s) of each rank's first step (warm-up) or before it: unused");
  if (rep.compute_at_boundary > 0)
    rep.notes.push_back(std::to_string(rep.compute_at_boundary) +
                        " compute event(s) started at the very instant a collective started or "
                        "ended (contended or not is undecidable): unused");
  if (scalar_all_reduces > 0)
    rep.notes.push_back(std::to_string(scalar_all_reduces) +
                        " scalar all-reduce(s) (clip norm, inf check: their groups differ from "
                        "the gradients') skipped");
  if (one_rank > 0)
    rep.notes.push_back(std::to_string(one_rank) +
                        " collective(s) over a one-rank group (they cost nothing) skipped");
  if (other_comm > 0)
    rep.notes.push_back(std::to_string(other_comm) +
                        " collective(s) other than all-gather, reduce-scatter, all-reduce "
                        "skipped");
  if (zero_duration > 0)
    rep.notes.push_back(std::to_string(zero_duration) + " zero-duration event(s) skipped");
  rep.collectives_skipped = scalar_all_reduces + one_rank + other_comm;
  if (rep.collectives_matched > 0)
    rep.notes.push_back(std::to_string(rep.collectives_matched) +
                        " collective instance(s) found on every rank of their group: timed "
                        "from the last rank's arrival (earlier ranks' waiting is not transfer)");

  if (!anything)
    throw Error(
        "calibrate: nothing could be fitted (no compute-bound compute event with FLOPs, no "
        "compute event overlapping a collective, no collective with a growing duration)");
  hw.validate();
  result.hw = std::move(hw);
  return result;
}

}  // namespace shardscope::sim
