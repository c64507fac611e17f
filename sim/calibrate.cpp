#include "sim/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "plan/error.h"
#include "plan/policy.h"
#include "plan/schedule.h"
#include "sim/calibrate_internal.h"
#include "sim/cost_model.h"
#include "traces/error.h"
#include "traces/trace_io.h"

namespace shardscope::sim {

using namespace calibrate_detail;

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
    const int64_t without_flops_before = rep.compute_without_flops;
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
    // The cost model's compute peak: the base's sustained clock applies.
    const double peak = base.peak_flops(dtype) * base.op_level.sustained_clock_fraction;

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
        // The memory roof at the type's fraction of HBM bandwidth, as the cost model prices it.
        s.mem = static_cast<double>(e.bytes) /
                (base.hbm_bytes_per_s * base.op_level.memory_efficiency_of(type)) * 1e9;
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
    if (usable == 0) {
      const int64_t without = rep.compute_without_flops - without_flops_before;
      throw Error(
          "trace " + in.name +
          ": no compute events with FLOPs and no collectives: nothing to calibrate from" +
          (without > 0
               ? " (its " + std::to_string(without) +
                     " compute events carry no FLOPs: a trace without shapes, such as a CUPTI "
                     "profile of a PyTorch program, names kernels but not their sizes; record "
                     "a torch.profiler trace with record_shapes=True and import it)"
               : std::string()));
    }
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
  // What this calibration fits, never what a calibrated base had fitted.
  hw.fitted = FittedCosts{};
  hw.fitted.calibrated = true;
  bool anything = false;
  bool gemm_terms_dropped = false;
  bool attention_terms_dropped = false;
  const auto is_linear_key = [](const std::string& k) {
    return k == "linear" || k == efficiency_key("linear", true);
  };

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
      double base_ns = 0, measured_ns = 0;
      for (const ComputeSample& c : td.compute_bound) {
        base_ns += c.a / base.efficiency_of(type, dtype, c.flops);
        measured_ns += c.d;
      }
      er.speed_vs_base = measured_ns > 0 ? base_ns / measured_ns : 0;
      er.curve = fit_efficiency_curve(td.compute_bound);
      // Only graph op types reach the model: the simulator prices graph ops
      // by type; other names (a Kineto kernel's) are reported, not written.
      er.written = is_efficiency_key(type);
      if (er.written) {
        hw.dtype_efficiency[dtype][type] = eff;
        hw.fitted.efficiency[dtype].insert(type);
        // Trace events carry FLOPs, not GEMM shapes: a fitted linear
        // efficiency already holds the shapes' effect, so the base's shape
        // terms (op_level.gemm) would count it twice.
        if (is_linear_key(type) && !base.op_level.gemm.is_off()) {
          hw.op_level.gemm.switch_off();
          gemm_terms_dropped = true;
        }
        // Likewise a fitted attention efficiency holds the kernel's rate at
        // the traced shapes, and the other direction takes it when it has no
        // fit of its own (below): the base's per-kernel fractions
        // (op_level.attention_efficiency) would take precedence over both.
        if ((type == "attention" || type == "attention.backward") &&
            !hw.op_level.attention_efficiency.empty()) {
          hw.op_level.attention_efficiency.clear();
          attention_terms_dropped = true;
        }
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
      hw.fitted.efficiency[dtype].insert(missing);
      if (!er->curve.empty())
        hw.efficiency_curves[dtype][missing] = er->curve;
      else if (hw.efficiency_curves.count(dtype))
        hw.efficiency_curves[dtype].erase(missing);
      const std::string label = missing + " (" + plan::dtype_name(dtype) + ")";
      kept.erase(std::remove(kept.begin(), kept.end(), label), kept.end());
      rep.notes.push_back(label + ": no fit of its own; takes " + type + "'s");
    }
  }
  // A fit in one dtype says how fast this machine runs the type relative to
  // the base. Another dtype without a fit of its own keeps the base's
  // absolute rate (carrying the ratio is wrong where the machine's dtypes
  // differ from the base's: the H200 engine's bf16 GEMMs ran at 0.3 of
  // the preset, its fp32 ones near it); the note says so and gives the ratio.
  {
    std::set<std::pair<std::string, plan::DType>> fitted;
    for (const EfficiencyReport& er : rep.efficiency)
      if (er.written) fitted.insert({er.op_type, er.dtype});
    for (const EfficiencyReport& er : rep.efficiency) {
      if (!er.written || !(er.speed_vs_base > 0)) continue;
      std::string others;
      for (plan::DType other : {plan::DType::f32, plan::DType::bf16, plan::DType::f16})
        if (other != er.dtype && !fitted.count({er.op_type, other}))
          others += std::string(others.empty() ? "" : ", ") + plan::dtype_name(other);
      if (others.empty()) continue;
      rep.notes.push_back(er.op_type + " in " + others +
                          ": not fitted, the base's efficiency (the " + plan::dtype_name(er.dtype) +
                          " fit ran at " + fmt("%.3g", er.speed_vs_base) + " x the base's speed)");
    }
  }
  if (attention_terms_dropped)
    rep.notes.push_back(
        "attention fitted: the base's per-kernel attention fractions "
        "(op_level.attention_efficiency) are dropped, the fit holds their effect");
  if (gemm_terms_dropped)
    rep.notes.push_back(
        "linear fitted: the base's GEMM shape terms (op_level.gemm: unaligned dimensions, wave "
        "quantization) are switched off, the fit holds their effect at the traced shapes");
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
      dr.ns = std::llround(mean_without_top_percent(dispatch_gaps));
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
      lr.ns = std::llround(mean_without_top_percent(launch_deltas));
      lr.fitted = true;
      hw.launch_overhead_ns = lr.ns;
      anything = true;
      // The measured launch-to-launch time already holds the framework's
      // host work: the base's per-op host dispatch would count it twice.
      if (!hw.op_level.host_dispatch_ns.empty() ||
          !hw.op_level.host_dispatch_per_param_ns.empty()) {
        hw.op_level.host_dispatch_ns.clear();
        hw.op_level.host_dispatch_per_param_ns.clear();
        rep.notes.push_back(
            "host dispatch: the fitted launch overhead replaces the base's op_level "
            "host_dispatch_ns and host_dispatch_per_param_ns (it already holds that host time)");
      }
    } else {
      rep.notes.push_back(
          "launch overhead: no two consecutive launches on a host lane; the base's " +
          std::to_string(base.launch_overhead_ns) + " ns is kept");
    }
  }

  fit_collectives(keys, base, hw, rep, &anything);
  fit_ring(base, hw, rep);

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
