// Calibration output: the hardware JSON that reads back to the fitted model,
// and the fit report as JSON and as text (sim/calibrate.h). The fitting is in
// calibrate.cpp.
#include "sim/calibrate.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "plan/schedule.h"
#include "sim/hardware.h"

namespace shardscope::sim {

namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string human_rate(double bytes_per_s) {
  return fmt("%.2f GB/s", bytes_per_s / 1e9);
}

std::string percent(double x) {
  return fmt("%.3f%%", 100.0 * x);
}

}  // namespace

nlohmann::json calibrated_hardware_json(const HardwareModel& hw,
                                        const std::string& preferred_base) {
  nlohmann::json j = hardware_to_json(hw);
  std::vector<std::string> candidates;
  if (is_hardware_preset(preferred_base)) candidates.push_back(preferred_base);
  for (const std::string& p : hardware_presets()) candidates.push_back(p);
  for (const std::string& p : candidates) {
    const HardwareModel b = hardware_preset(p);
    // Maps merge into the base's on reading: every entry of the base's must
    // be in hw's too, or the base would add it back.
    bool covered = true;
    for (const auto& [type, e] : b.efficiency) covered = covered && hw.efficiency.count(type);
    for (const auto& [dtype, map] : b.dtype_efficiency)
      for (const auto& [type, e] : map)
        covered = covered && hw.dtype_efficiency.count(dtype) &&
                  hw.dtype_efficiency.at(dtype).count(type);
    for (const auto& [dtype, map] : b.efficiency_curves)
      for (const auto& [type, k] : map)
        covered = covered && hw.efficiency_curves.count(dtype) &&
                  hw.efficiency_curves.at(dtype).count(type);
    for (const auto& [kind, f] : b.memory_ops) covered = covered && hw.memory_ops.count(kind);
    if (covered) {
      j["base"] = p;
      return j;
    }
  }
  // No preset's types are all in hw's map: state "default" explicitly and
  // start from the preset whose map holds only "default".
  j["efficiency"]["default"] = hw.efficiency_of("default");
  j["base"] = "cpu-local";
  return j;
}

nlohmann::json calibration_report_to_json(const CalibrationReport& r) {
  nlohmann::json j;
  j["name"] = r.name;
  j["base"] = r.base;
  j["traces"] = r.traces;
  j["nccl_tests"] = r.nccl_tables;
  nlohmann::json eff = nlohmann::json::array();
  for (const EfficiencyReport& e : r.efficiency) {
    nlohmann::json curve = nlohmann::json::array();
    for (const EfficiencyKnot& k : e.curve) curve.push_back({k.flops, k.efficiency});
    eff.push_back({{"op_type", e.op_type},
                   {"speed_vs_base", e.speed_vs_base},
                   {"curve", curve},
                   {"dtype", plan::dtype_name(e.dtype)},
                   {"events", e.events},
                   {"memory_bound", e.memory_bound},
                   {"contended", e.contended},
                   {"base_efficiency", e.base_efficiency},
                   {"efficiency", e.efficiency},
                   {"fitted", e.fitted},
                   {"clamped", e.clamped},
                   {"rms_rel_residual", e.rms_rel_residual},
                   {"max_rel_residual", e.max_rel_residual}});
  }
  j["efficiency"] = eff;
  nlohmann::json mem = nlohmann::json::array();
  for (const MemoryOpReport& m : r.memory_ops)
    mem.push_back({{"kind", m.kind},
                   {"events", m.events},
                   {"distinct_sizes", m.distinct_sizes},
                   {"fixed_ns", m.fit.fixed_ns},
                   {"bandwidth_efficiency", m.fit.bandwidth_efficiency},
                   {"fixed_from_zero", m.fixed_from_zero},
                   {"capped", m.capped},
                   {"rms_rel_residual", m.rms_rel_residual},
                   {"max_rel_residual", m.max_rel_residual}});
  j["memory_ops"] = mem;
  nlohmann::json coll = nlohmann::json::array();
  for (const CollectiveReport& c : r.collectives) {
    nlohmann::json small = nullptr;
    if (c.fit.small_max_bytes > 0)
      small = {{"max_bytes", c.fit.small_max_bytes},
               {"latency_ns", c.fit.small_latency_ns},
               {"bus_bytes_per_s", c.fit.small_bus_bytes_per_s}};
    coll.push_back({{"kind", plan::op_kind_name(c.fit.kind)},
                    {"ranks", c.fit.ranks},
                    {"multi_node", c.fit.multi_node},
                    {"points", c.points},
                    {"trace_points", c.trace_points},
                    {"nccl_points", c.nccl_points},
                    {"distinct_sizes", c.distinct_sizes},
                    {"latency_ns", c.fit.latency_ns},
                    {"bus_bytes_per_s", c.fit.bus_bytes_per_s},
                    {"latency_from_base", c.latency_from_base},
                    {"latency_clamped", c.latency_clamped},
                    {"small", small},
                    {"rms_rel_residual", c.rms_rel_residual},
                    {"max_rel_residual", c.max_rel_residual}});
  }
  j["collectives"] = coll;
  const ContentionReport& c = r.contention;
  j["contention"] = {{"events", c.events},
                     {"base_factor", c.base_factor},
                     {"factor", c.factor},
                     {"fitted", c.fitted},
                     {"clamped", c.clamped},
                     {"rms_rel_residual", c.rms_rel_residual},
                     {"max_rel_residual", c.max_rel_residual}};
  j["ring"] = {{"fitted", r.ring.fitted},
               {"fits", r.ring.fits},
               {"nvlink_bus_bytes_per_s", r.ring.bus_bytes_per_s},
               {"collective_latency_ns", r.ring.collective_latency_ns},
               {"nvlink_latency_ns", r.ring.hop_ns},
               {"hop_from_base", r.ring.hop_from_base}};
  const DispatchReport& d = r.dispatch;
  j["op_dispatch"] = {{"gaps", d.gaps},     {"base_ns", d.base_ns}, {"ns", d.ns},
                      {"fitted", d.fitted}, {"p10_ns", d.p10_ns},   {"p90_ns", d.p90_ns}};
  j["launch_overhead"] = {{"launches", r.launch.launches},
                          {"base_ns", r.launch.base_ns},
                          {"ns", r.launch.ns},
                          {"fitted", r.launch.fitted}};
  j["events"] = {{"compute", r.compute_events},
                 {"compute_without_flops", r.compute_without_flops},
                 {"compute_at_collective_boundary", r.compute_at_boundary},
                 {"compute_warmup", r.compute_warmup},
                 {"collectives_warmup", r.collectives_warmup},
                 {"collectives", r.collective_events},
                 {"collectives_skipped", r.collectives_skipped},
                 {"collectives_matched", r.collectives_matched}};
  j["notes"] = r.notes;
  return j;
}

std::string format_calibration_report(const CalibrationReport& r) {
  std::string out;
  char line[256];
  out += "hardware '" + r.name + "' calibrated from " + std::to_string(r.traces.size()) +
         " trace(s) and " + std::to_string(r.nccl_tables.size()) + " nccl-tests table(s); base '" +
         r.base + "' (peaks, HBM bandwidth and the rest kept)\n";
  out += "residuals: (predicted - measured) / measured of each duration\n\n";
  if (!r.efficiency.empty()) {
    out +=
        "compute efficiency (fraction of the dtype's peak FLOP/s; a fit applies to ops of its "
        "dtype, other dtypes keep the base's):\n";
    std::snprintf(line, sizeof line, "  %-22s %5s %8s %9s %9s %8s %9s %10s %10s\n", "op type",
                  "dtype", "events", "mem-bound", "contended", "base", "fitted", "rms rel",
                  "max rel");
    out += line;
    for (const EfficiencyReport& e : r.efficiency) {
      const std::string fitted =
          e.fitted ? fmt("%.4f", e.efficiency) + (e.clamped ? "*" : "") : std::string("kept");
      std::snprintf(line, sizeof line, "  %-22s %5s %8lld %9lld %9lld %8.4f %9s %10s %10s\n",
                    e.op_type.c_str(), plan::dtype_name(e.dtype), static_cast<long long>(e.events),
                    static_cast<long long>(e.memory_bound), static_cast<long long>(e.contended),
                    e.base_efficiency, fitted.c_str(), percent(e.rms_rel_residual).c_str(),
                    percent(e.max_rel_residual).c_str());
      out += line;
      if (!e.curve.empty()) {
        out += "    by size (FLOPs: efficiency, log-linear between):";
        for (const EfficiencyKnot& k : e.curve)
          out += " " + fmt("%.3g", k.flops) + ": " + fmt("%.4f", k.efficiency);
        out += "\n";
      }
    }
    out += "\n";
  }
  if (!r.memory_ops.empty()) {
    out += "ops without FLOPs (t = fixed + bytes / (HBM bw x eff)):\n";
    std::snprintf(line, sizeof line, "  %-22s %8s %6s %12s %9s %10s %10s\n", "op kind", "events",
                  "sizes", "fixed", "eff", "rms rel", "max rel");
    out += line;
    for (const MemoryOpReport& m : r.memory_ops) {
      const std::string fixed = fmt("%.3f us", static_cast<double>(m.fit.fixed_ns) / 1e3) +
                                (m.fixed_from_zero ? "^" : "");
      const std::string eff = fmt("%.4f", m.fit.bandwidth_efficiency) + (m.capped ? "*" : "");
      std::snprintf(line, sizeof line, "  %-22s %8lld %6lld %12s %9s %10s %10s\n", m.kind.c_str(),
                    static_cast<long long>(m.events), static_cast<long long>(m.distinct_sizes),
                    fixed.c_str(), eff.c_str(), percent(m.rms_rel_residual).c_str(),
                    percent(m.max_rel_residual).c_str());
      out += line;
    }
    out += "\n";
  }
  if (!r.collectives.empty()) {
    out += "collectives (t = latency + f S (n-1)/n / busbw, f = 2 for all-reduce):\n";
    std::snprintf(line, sizeof line, "  %-15s %5s %6s %7s %6s %12s %13s %10s %10s\n", "kind",
                  "ranks", "nodes", "points", "sizes", "latency", "bus bw", "rms rel", "max rel");
    out += line;
    for (const CollectiveReport& c : r.collectives) {
      const std::string latency = fmt("%.3f us", static_cast<double>(c.fit.latency_ns) / 1e3) +
                                  (c.latency_from_base ? "^" : "");
      std::snprintf(line, sizeof line, "  %-15s %5lld %6s %7lld %6lld %12s %13s %10s %10s\n",
                    plan::op_kind_name(c.fit.kind), static_cast<long long>(c.fit.ranks),
                    c.fit.multi_node ? "multi" : "one", static_cast<long long>(c.points),
                    static_cast<long long>(c.distinct_sizes), latency.c_str(),
                    human_rate(c.fit.bus_bytes_per_s).c_str(), percent(c.rms_rel_residual).c_str(),
                    percent(c.max_rel_residual).c_str());
      out += line;
      if (c.fit.small_max_bytes > 0) {
        const std::string small = "<= " + std::to_string(c.fit.small_max_bytes) + " B";
        const std::string small_latency =
            fmt("%.3f us", static_cast<double>(c.fit.small_latency_ns) / 1e3);
        std::snprintf(line, sizeof line, "    %-35s %12s %13s\n", small.c_str(),
                      small_latency.c_str(), human_rate(c.fit.small_bus_bytes_per_s).c_str());
        out += line;
      }
    }
    const bool any_from_base =
        std::any_of(r.collectives.begin(), r.collectives.end(),
                    [](const CollectiveReport& c) { return c.latency_from_base; });
    out += any_from_base ? "  (^ latency kept from the base: one message size)\n\n" : "\n";
  }
  if (r.ring.fitted)
    out += "one-node ring for other group sizes (t = C + f (n-1) hop + f S (n-1)/n / B) from " +
           std::to_string(r.ring.fits) + " fit(s): B " + fmt("%.2f", r.ring.bus_bytes_per_s / 1e9) +
           " GB/s, C " + fmt("%.3f", static_cast<double>(r.ring.collective_latency_ns) / 1e3) +
           " us, hop " + fmt("%.3f", static_cast<double>(r.ring.hop_ns) / 1e3) + " us" +
           (r.ring.hop_from_base ? " (hop kept from the base: one group size)" : "") + "\n\n";
  const ContentionReport& c = r.contention;
  if (c.fitted)
    out += "contention factor " + fmt("%.4f", c.factor) + " (base " + fmt("%g", c.base_factor) +
           ") from " + std::to_string(c.events) + " overlapped compute event(s), rms rel " +
           percent(c.rms_rel_residual) + ", max rel " + percent(c.max_rel_residual) + "\n";
  else
    out += "contention factor " + fmt("%g", c.factor) + " kept from the base\n";
  const DispatchReport& d = r.dispatch;
  if (d.fitted)
    out += "op dispatch " + fmt("%.3f", static_cast<double>(d.ns) / 1e3) + " us (base " +
           fmt("%g", static_cast<double>(d.base_ns) / 1e3) + " us): mean of " +
           std::to_string(d.gaps) + " gap(s) between ready device ops, p10 " +
           fmt("%.3f", d.p10_ns / 1e3) + " us, p90 " + fmt("%.3f", d.p90_ns / 1e3) + " us\n";
  else
    out += "op dispatch " + fmt("%g", static_cast<double>(d.ns) / 1e3) + " us kept from the base\n";
  if (r.launch.fitted)
    out += "launch overhead " + fmt("%.3f", static_cast<double>(r.launch.ns) / 1e3) + " us (base " +
           fmt("%g", static_cast<double>(r.launch.base_ns) / 1e3) +
           " us): mean host time between " + std::to_string(r.launch.launches) +
           " pair(s) of consecutive launches\n";
  else
    out += "launch overhead " + fmt("%g", static_cast<double>(r.launch.ns) / 1e3) +
           " us kept from the base\n";
  if (!r.notes.empty()) {
    out += "\nnotes:\n";
    for (const std::string& n : r.notes) out += "  - " + n + "\n";
  }
  return out;
}

}  // namespace shardscope::sim
