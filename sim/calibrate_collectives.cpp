#include <algorithm>
#include <cmath>
#include <set>

#include "sim/calibrate_internal.h"

namespace shardscope::sim::calibrate_detail {

void fit_collectives(const std::map<Key, KeyData>& keys, const HardwareModel& base,
                     HardwareModel& hw, CalibrationReport& rep, bool* anything) {
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
    *anything = true;
  }
}

void fit_ring(const HardwareModel& base, HardwareModel& hw, CalibrationReport& rep) {
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
}

}  // namespace shardscope::sim::calibrate_detail
