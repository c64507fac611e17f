#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "sim/calibrate_internal.h"

namespace shardscope::sim::calibrate_detail {

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

double mean_without_top_percent(const std::vector<double>& sorted) {
  const size_t kept = sorted.size() - sorted.size() / 100;
  double sum = 0;
  for (size_t i = 0; i < kept; ++i) sum += sorted[i];
  return sum / static_cast<double>(kept);
}

}  // namespace shardscope::sim::calibrate_detail
