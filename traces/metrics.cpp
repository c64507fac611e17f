#include "traces/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "traces/metrics_collectives.h"
#include "traces/metrics_values.h"

namespace shardscope::traces {

using detail::add_notes;
using detail::aggregate;
using detail::median;
using detail::RowAcc;
using detail::to_metric_values;
using detail::to_rows;
using detail::Values;

MetricsAccumulator::MetricsAccumulator(MetricsOptions options) : options_(options) {}

MetricsAccumulator::MetricsAccumulator(const StringTable& strings, MetricsOptions options)
    : options_(options), strings_(strings) {}

MetricsAccumulator::RankState& MetricsAccumulator::rank_state(int32_t rank) {
  return ranks_[rank];
}

void MetricsAccumulator::set_comm_split(bool split, const std::string& not_split_reason,
                                        int64_t unmatched) {
  comm_split_ = split;
  not_split_reason_ = not_split_reason;
  unmatched_collectives_ = unmatched;
}

void MetricsAccumulator::add_rank(int32_t rank, const std::vector<int32_t>& represents) {
  rank_state(rank).represents = represents;
}

void MetricsAccumulator::set_step_rule(int32_t rank, StepRule rule) {
  if (rule == StepRule::automatic)
    throw std::invalid_argument("rank " + std::to_string(rank) +
                                ": a rank's step rule is launch or markers");
  RankState& r = rank_state(rank);
  if (!r.steps.empty() || r.latest != INT64_MIN)
    throw std::invalid_argument("rank " + std::to_string(rank) +
                                ": set the step rule before adding steps and events");
  r.rule = rule;
}

int32_t MetricsAccumulator::window_by_start(const RankState& r, int64_t t) {
  if (r.steps.empty() || t < r.steps.front().start_ns) return -1;
  if (t >= r.steps.back().start_ns) return static_cast<int32_t>(r.steps.size() - 1);
  auto it = std::upper_bound(r.steps.begin(), r.steps.end(), t,
                             [](int64_t x, const Step& s) { return x < s.start_ns; });
  return static_cast<int32_t>(it - r.steps.begin()) - 1;
}

int32_t MetricsAccumulator::window_of(const RankState& r, int64_t t) {
  if (t == kNoStep) return -1;
  if (r.steps.empty() || t < r.steps.front().start_ns) return -1;
  if (r.rule == StepRule::launch) {
    // HTA's host rule: start <= t < end of the latest step starting at or before t.
    auto it = std::upper_bound(r.steps.begin(), r.steps.end(), t,
                               [](int64_t x, const Step& s) { return x < s.start_ns; });
    const auto k = static_cast<int32_t>(it - r.steps.begin()) - 1;
    return t < r.steps[static_cast<size_t>(k)].end_ns ? k : -1;
  }
  if (t >= r.steps.back().start_ns) return static_cast<int32_t>(r.steps.size() - 1);
  auto it = std::upper_bound(r.steps.begin(), r.steps.end(), t,
                             [](int64_t x, const Step& s) { return x < s.start_ns; });
  return static_cast<int32_t>(it - r.steps.begin()) - 1;
}

void MetricsAccumulator::add_step(int32_t rank, const Step& step) {
  RankState& r = rank_state(rank);
  const std::string who = "rank " + std::to_string(rank) + ", step " + std::to_string(step.number);
  if (step.end_ns < step.start_ns) throw std::invalid_argument(who + ": ends before it starts");
  if (!r.steps.empty() && step.start_ns <= r.steps.back().start_ns)
    throw std::invalid_argument(who + ": must start after the previous step");
  if (r.latest >= step.start_ns)
    throw std::invalid_argument(who + ": added after an event or memory record at " +
                                std::to_string(r.latest) + " ns, at or after its start (" +
                                std::to_string(step.start_ns) +
                                " ns); add each step before what it contains");
  r.steps.push_back(step);
  r.windows.emplace_back();
}

void MetricsAccumulator::end_step(int32_t rank, int64_t end_ns) {
  RankState& r = rank_state(rank);
  const std::string who = "rank " + std::to_string(rank);
  if (r.steps.empty()) throw std::invalid_argument(who + ": end_step without a step");
  if (r.rule == StepRule::launch)
    throw std::invalid_argument(who + ": end_step under the launch rule would move host events");
  if (end_ns < r.steps.back().start_ns)
    throw std::invalid_argument(who + ", step " + std::to_string(r.steps.back().number) +
                                ": ends before it starts");
  r.steps.back().end_ns = end_ns;
}

void MetricsAccumulator::add_event(int32_t rank, LaneKind lane_kind, const Event& e) {
  add_event(rank, lane_kind, e, e.start_ns);
}

void MetricsAccumulator::add_event(int32_t rank, LaneKind lane_kind, const Event& e,
                                   int64_t step_time_ns) {
  add_event(rank, lane_kind, e, step_time_ns, e.start_ns);
}

void MetricsAccumulator::add_event(int32_t rank, LaneKind lane_kind, const Event& e,
                                   int64_t step_time_ns, int64_t transfer_start_ns) {
  if (e.dur_ns < 0 || e.start_ns > std::numeric_limits<int64_t>::max() - e.dur_ns)
    throw std::invalid_argument("rank " + std::to_string(rank) +
                                ": event with a negative or overflowing duration");
  RankState& r = rank_state(rank);
  const int32_t index = window_of(r, step_time_ns);
  Window& w = window(r, index);
  if (step_time_ns != kNoStep) r.latest = std::max(r.latest, step_time_ns);
  const int64_t end = e.start_ns + e.dur_ns;
  w.first_start = std::min(w.first_start, e.start_ns);
  w.last_end = std::max(w.last_end, end);
  if (is_compute(e.category)) w.comp.add(e.start_ns, end);
  // Waiting for the last rank of a collective: [start, min(transfer start, end)).
  int64_t wait = 0;
  if (is_comm(e.category)) {
    w.comm.add(e.start_ns, end);
    const int64_t transfer_start = std::min(std::max(transfer_start_ns, e.start_ns), end);
    w.transfer.add(transfer_start, end);
    wait = transfer_start - e.start_ns;
  }
  if (lane_kind != LaneKind::host && e.category != Category::sync &&
      e.category != Category::marker && e.category != Category::host) {
    w.device.add(e.start_ns, end);
    ++w.device_events;
  }
  if (options_.breakdown && r.events) {
    if (r.event_window.size() >= r.events->size())
      throw std::invalid_argument("rank " + std::to_string(rank) +
                                  ": more events than breakdown_reads was given");
    r.event_window.push_back(index);
  } else if (options_.breakdown) {
    r.lanes[e.lane].push_back(SelfRecord{e.start_ns, end, wait, e.unit,
                                         e.op != kNoString ? e.op : e.name, index, e.category});
  }
}

void MetricsAccumulator::breakdown_reads(int32_t rank, const std::vector<Event>* events,
                                         const std::vector<int64_t>* transfer_start) {
  RankState& r = rank_state(rank);
  if (!r.lanes.empty() || !r.event_window.empty())
    throw std::invalid_argument("rank " + std::to_string(rank) +
                                ": breakdown_reads after the rank's first event");
  if (transfer_start && events && transfer_start->size() != events->size())
    throw std::invalid_argument("rank " + std::to_string(rank) +
                                ": breakdown_reads: one transfer start per event");
  r.events = events;
  r.transfer_start = transfer_start;
  if (options_.breakdown && events) r.event_window.reserve(events->size());
}

void MetricsAccumulator::add_memory(int32_t rank, const MemoryEvent& m) {
  RankState& r = rank_state(rank);
  Window& w = window(r, window_by_start(r, m.time_ns));  // memory is not launched: by time
  r.latest = std::max(r.latest, m.time_ns);
  if (!w.has_memory) {
    w.has_memory = true;
    w.peak_allocated = m.allocated;
    w.peak_reserved = m.reserved;
    w.last_time = m.time_ns;
    w.last_allocated = m.allocated;
    w.last_reserved = m.reserved;
    return;
  }
  w.peak_allocated = std::max(w.peak_allocated, m.allocated);
  w.peak_reserved = std::max(w.peak_reserved, m.reserved);
  if (m.time_ns >= w.last_time) {  // ties: the later record wins, as in time order
    w.last_time = m.time_ns;
    w.last_allocated = m.allocated;
    w.last_reserved = m.reserved;
  }
}

Metrics MetricsAccumulator::finish() const {
  Metrics out;
  out.source = source_;
  std::vector<std::pair<Values, double>> rank_values;
  std::map<int64_t, std::vector<std::pair<Values, double>>> step_values;
  std::map<int64_t, bool> step_reported;
  // Indexed by string id (ids are dense); an id that is never counted keeps
  // count 0 and makes no row.
  std::vector<RowAcc> by_unit_id(strings_.size()), by_op_id(strings_.size());
  RowAcc by_category[kCategoryCount];
  double world = 0;

  for (const auto& entry : ranks_) {
    const int32_t rank = entry.first;
    const RankState& r = entry.second;
    const double weight = r.represents.empty() ? 1.0 : static_cast<double>(r.represents.size());
    world += weight;
    const size_t nwindows = r.steps.empty() ? 1 : r.steps.size();
    auto window_at = [&](size_t k) -> const Window& {
      return r.steps.empty() ? r.before : r.windows[k];
    };
    // Windows in the median: steps 2..S when S > 1.
    // Windows in the median: steps 2..S when S > 1 (the first warms up).
    // The launch rule (profiler traces) also drops the last step, as HTA
    // does: the profiler stopped inside it, so its device work is cut off.
    const auto nsteps = static_cast<int32_t>(r.steps.size());
    auto reported = [&](int32_t index) {
      if (nsteps == 0) return index == -1;
      if (r.rule == StepRule::launch && nsteps > 1) {
        if (nsteps == 2) return index == 0;
        return index >= 1 && index <= nsteps - 2;
      }
      if (nsteps == 1) return index == 0;
      return index >= 1;
    };

    std::vector<Values> all;
    std::vector<Values> in_median;
    std::vector<StepMetrics> per_step;
    int64_t device_events = 0;
    // Memory carried into a window: the latest record before it.
    bool carry = !r.steps.empty() && r.before.has_memory;
    int64_t carry_allocated = carry ? r.before.last_allocated : 0;
    int64_t carry_reserved = carry ? r.before.last_reserved : 0;
    for (size_t k = 0; k < nwindows; ++k) {
      const Window& w = window_at(k);
      Values v;
      const bool any = w.last_end >= w.first_start;
      // The iteration period (docs/traces.md, "step time"): the step's own
      // range, else the distance to the next step's start, else (the last
      // step, an empty range) its events' extent from its start. Without
      // steps: the events' extent.
      int64_t period_start = w.first_start;
      int64_t period_end = any ? w.last_end : w.first_start;
      if (!r.steps.empty()) {
        const Step& st = r.steps[k];
        period_start = st.start_ns;
        if (st.end_ns > st.start_ns) {
          period_end = st.end_ns;
        } else if (k + 1 < r.steps.size()) {
          period_end = r.steps[k + 1].start_ns;
        } else {
          period_end = any ? std::max(w.last_end, st.start_ns) : st.start_ns;
        }
      }
      v.step_ns = any || !r.steps.empty()
                      ? static_cast<double>(Interval{period_start, period_end}.length())
                      : 0;
      const auto& comp = w.comp.intervals();
      const auto& comm = w.comm.intervals();
      const uint64_t comp_ns = w.comp.length();
      const uint64_t comm_ns = w.comm.length();
      const uint64_t both_ns = intersection_length(comp, comm);
      v.compute_ns = static_cast<double>(comp_ns);
      v.comm_ns = static_cast<double>(comm_ns);
      v.exposed_ns = static_cast<double>(comm_ns - both_ns);
      v.overlap = comm_ns > 0 ? static_cast<double>(both_ns) / static_cast<double>(comm_ns) : 0;
      v.transfer_ns = static_cast<double>(w.transfer.length());
      v.wait_ns = static_cast<double>(comm_ns - w.transfer.length());
      const auto& device = w.device.intervals();
      const uint64_t device_ns = w.device.length();
      v.device_span_ns =
          device.empty()
              ? 0
              : static_cast<double>(Interval{device.front().start, device.back().end}.length());
      v.idle_ns = v.device_span_ns - static_cast<double>(device_ns);
      if (!device.empty() && !r.steps.empty())
        v.lag_ns = static_cast<double>(static_cast<int64_t>(
            static_cast<uint64_t>(device.back().end) - static_cast<uint64_t>(period_end)));
      v.non_compute_ns = static_cast<double>(device_ns - intersection_length(device, comp));
      int64_t peak_allocated = carry ? carry_allocated : 0;
      int64_t peak_reserved = carry ? carry_reserved : 0;
      if (w.has_memory) {
        peak_allocated = carry ? std::max(peak_allocated, w.peak_allocated) : w.peak_allocated;
        peak_reserved = carry ? std::max(peak_reserved, w.peak_reserved) : w.peak_reserved;
        carry = true;
        carry_allocated = w.last_allocated;
        carry_reserved = w.last_reserved;
      }
      v.peak_allocated = static_cast<double>(peak_allocated);
      v.peak_reserved = static_cast<double>(peak_reserved);
      const auto index = r.steps.empty() ? -1 : static_cast<int32_t>(k);
      all.push_back(v);
      if (reported(index)) in_median.push_back(v);
      const int64_t number = r.steps.empty() ? 0 : r.steps[k].number;
      step_values[number].emplace_back(v, weight);
      step_reported[number] = step_reported[number] || reported(index);
      StepMetrics sm;
      to_metric_values(v, &sm);
      sm.step = number;
      sm.reported = reported(index);
      sm.device_events = w.device_events;
      per_step.push_back(sm);
      device_events += w.device_events;
    }
    out.rank_steps += weight * static_cast<double>(in_median.size());
    const Values rv = median(in_median);
    RankMetrics rm;
    to_metric_values(rv, &rm);
    rm.rank = rank;
    rm.represents = r.represents;
    rm.steps = static_cast<int64_t>(nwindows);
    rm.rule = r.rule;
    rm.per_step = std::move(per_step);
    rm.device_events = device_events;
    rm.outside_steps_device_events = r.steps.empty() ? 0 : r.before.device_events;
    out.ranks.push_back(std::move(rm));
    rank_values.emplace_back(rv, weight);

    if (!options_.breakdown) continue;
    // One lane's records, at(i) for i < n in the order they were added.
    // start_end(i): the record's {start, end} (what the order needs).
    auto add_lane = [&](size_t n, const auto& start_end, const auto& at) {
      // Visit order: start ascending, end descending. A lane already in
      // strict order (no two events with the same start and end: the usual
      // case) is visited as it is, which is what a sort would give; else
      // std::sort of {start, end, index} keys under the same comparison
      // gives the permutation a sort of the records themselves would (its
      // moves depend on comparison results only), so equal events nest as
      // they always did. 4 bytes per record of the lane (24 while sorting).
      std::vector<uint32_t> order(n);
      bool strict = true;
      for (size_t i = 0; i < n; ++i) {
        order[i] = static_cast<uint32_t>(i);
        if (i > 0 && strict) {
          const auto [prev_start, prev_end] = start_end(static_cast<uint32_t>(i - 1));
          const auto [start, end] = start_end(static_cast<uint32_t>(i));
          strict = prev_start < start || (prev_start == start && prev_end > end);
        }
      }
      if (!strict) {
        struct Key {
          int64_t start;
          int64_t end;
          uint32_t index;  // of the record
        };
        std::vector<Key> keys(n);
        for (size_t i = 0; i < n; ++i) {
          const auto [start, end] = start_end(static_cast<uint32_t>(i));
          keys[i] = Key{start, end, static_cast<uint32_t>(i)};
        }
        std::sort(keys.begin(), keys.end(), [](const Key& x, const Key& y) {
          if (x.start != y.start) return x.start < y.start;
          return x.end > y.end;
        });
        for (size_t i = 0; i < n; ++i) order[i] = keys[i].index;
      }
      // Self time, by position in `order`: subtract each event from its
      // direct parent (the innermost open event containing it). A partial
      // overlap closes the open chain. `open` holds positions and ends.
      std::vector<uint64_t> self(n);
      std::vector<std::pair<size_t, int64_t>> open;
      for (size_t i = 0; i < n; ++i) {
        const auto [start, end] = start_end(order[i]);
        self[i] = Interval{start, end}.length();
        while (!open.empty() && open.back().second <= start) open.pop_back();
        if (!open.empty() && end > open.back().second) open.clear();
        if (!open.empty()) self[open.back().first] -= self[i];
        open.emplace_back(i, end);
      }
      for (size_t i = 0; i < n; ++i) {
        const SelfRecord e = at(order[i]);
        if (!reported(e.window)) continue;
        const uint64_t dur = Interval{e.start, e.end}.length();
        const uint32_t top = std::max(e.unit, e.op);
        if (top >= by_unit_id.size()) {
          by_unit_id.resize(size_t{top} + 1);
          by_op_id.resize(size_t{top} + 1);
        }
        for (RowAcc* a :
             {&by_unit_id[e.unit], &by_op_id[e.op], &by_category[static_cast<int>(e.category)]}) {
          ++a->count;
          a->total_ns += dur;
          a->self_ns += self[i];
          a->weighted_count += weight;
          a->weighted_ns += weight * static_cast<double>(dur);
          a->weighted_self_ns += weight * static_cast<double>(self[i]);
          a->weighted_wait_ns += weight * static_cast<double>(e.wait);
        }
      }
    };
    // Sums are of integers (durations, integer weights), so the order of
    // lanes does not change them.
    for (const auto& lane_records : r.lanes) {
      const std::vector<SelfRecord>& recs = lane_records.second;  // a binding cannot be captured
      add_lane(
          recs.size(),
          [&recs](uint32_t i) { return std::pair<int64_t, int64_t>(recs[i].start, recs[i].end); },
          [&recs](uint32_t i) -> const SelfRecord& { return recs[i]; });
    }
    if (!r.events) continue;
    // breakdown_reads: the events in place, grouped by lane in index order
    // (what `lanes` would hold), 4 bytes per event.
    const std::vector<Event>& events = *r.events;
    const size_t fed = r.event_window.size();
    // Lane ids index `lane_range` (lanes of a trace are few; an id past
    // 2^16 falls back to a map).
    uint32_t max_lane = 0;
    for (size_t i = 0; i < fed; ++i) max_lane = std::max(max_lane, events[i].lane);
    std::vector<std::pair<size_t, size_t>> lane_range;  // by lane: [begin, end) in by_lane
    std::map<uint32_t, size_t> lane_slot;               // lane -> index in lane_range
    const bool dense = max_lane < (1u << 16);
    if (dense) {
      lane_range.resize(size_t{max_lane} + 1);
    } else {
      for (size_t i = 0; i < fed; ++i) lane_slot.emplace(events[i].lane, 0);
      for (auto& [lane, slot] : lane_slot) {
        (void)lane;
        slot = lane_range.size();
        lane_range.emplace_back();
      }
    }
    auto slot_of = [&](uint32_t lane) { return dense ? size_t{lane} : lane_slot.at(lane); };
    for (size_t i = 0; i < fed; ++i) ++lane_range[slot_of(events[i].lane)].second;
    size_t filled = 0;
    for (auto& range : lane_range) {
      range.first = filled;
      filled += range.second;
      range.second = range.first;  // advanced below to the range's end
    }
    std::vector<uint32_t> by_lane(fed);
    for (size_t i = 0; i < fed; ++i)
      by_lane[lane_range[slot_of(events[i].lane)].second++] = static_cast<uint32_t>(i);
    for (const auto& range : lane_range) {
      if (range.second == range.first) continue;
      const uint32_t* ids = by_lane.data() + range.first;
      auto start_end = [&events, ids](uint32_t k) {
        const Event& e = events[ids[k]];
        return std::pair<int64_t, int64_t>(e.start_ns, e.start_ns + e.dur_ns);
      };
      add_lane(range.second - range.first, start_end, [&, ids](uint32_t k) {
        const uint32_t i = ids[k];
        const Event& e = events[i];
        const int64_t end = e.start_ns + e.dur_ns;
        int64_t wait = 0;
        if (is_comm(e.category)) {
          const int64_t ts = r.transfer_start ? (*r.transfer_start)[i] : e.start_ns;
          wait = std::min(std::max(ts, e.start_ns), end) - e.start_ns;
        }
        return SelfRecord{
            e.start_ns,        end,       wait, e.unit, e.op != kNoString ? e.op : e.name,
            r.event_window[i], e.category};
      });
    }
  }

  to_metric_values(aggregate(rank_values), &out.total);
  for (const auto& [number, values] : step_values) {
    StepMetrics s;
    to_metric_values(aggregate(values), &s);
    s.step = number;
    s.reported = step_reported[number];
    out.steps.push_back(s);
  }
  out.world_size = world_size_ > 0 ? world_size_ : static_cast<int32_t>(world);
  out.comm_split = comm_split_;
  // The simulator prices transfers (its comm is all transfer): no note there.
  if (!comm_split_ && !not_split_reason_.empty() && source_ != Source::simulator)
    out.notes.push_back("communication is not split into waiting for the last rank and transfer: " +
                        not_split_reason_);
  if (comm_split_ && unmatched_collectives_ > 0)
    out.notes.push_back(std::to_string(unmatched_collectives_) +
                        " collective events are not split into wait and transfer: their count "
                        "differs between ranks, so they could not be matched");
  add_notes(out);
  if (options_.breakdown) {
    std::map<std::string, RowAcc> by_unit, by_op;
    for (uint32_t id = 0; id < by_unit_id.size(); ++id) {
      if (by_unit_id[id].count)
        by_unit[id == kNoString ? std::string("(none)") : std::string(strings_.get(id))] =
            by_unit_id[id];
      if (by_op_id[id].count) by_op[std::string(strings_.get(id))] = by_op_id[id];
    }
    out.by_unit = to_rows(by_unit, out.rank_steps);
    out.by_op = to_rows(by_op, out.rank_steps);
    std::map<std::string, RowAcc> cats;
    for (int c = 0; c < kCategoryCount; ++c)
      if (by_category[c].count) cats[category_name(static_cast<Category>(c))] = by_category[c];
    out.by_category = to_rows(cats, out.rank_steps);
  }
  return out;
}

const char* step_rule_name(StepRule r) {
  switch (r) {
    case StepRule::automatic:
      return "automatic";
    case StepRule::launch:
      return "launch";
    case StepRule::markers:
      return "markers";
  }
  return "invalid";
}

Metrics compute_metrics(const Trace& t, MetricsOptions options) {
  bool any_launch = false;
  for (const RankTrace& r : t.ranks)
    for (const Flow& f : r.flows) any_launch = any_launch || is_launch_flow(r, f);
  StepRule rule = options.step_rule;
  if (rule == StepRule::automatic) rule = any_launch ? StepRule::launch : StepRule::markers;
  if (rule == StepRule::launch && !any_launch)
    throw StepRuleError(
        "the launch step rule needs launch links (host calls carrying their kernels' "
        "correlation ids, as in PyTorch profiler traces); this trace has none, so its steps are "
        "its own step markers (--step-rule markers)");
  MetricsAccumulator acc(t.strings, options);
  const CollectiveMatch collectives = match_collectives(t);
  acc.set_comm_split(collectives.split, collectives.reason, collectives.unmatched);
  acc.set_source(t.meta.source);
  acc.set_world_size(t.meta.world_size);
  std::vector<int64_t> launched_at;
  for (const RankTrace& r : t.ranks) {
    acc.add_rank(r.rank, r.represents);
    acc.set_step_rule(r.rank, rule);
    for (const Step& s : r.steps) acc.add_step(r.rank, s);
    if (rule == StepRule::launch) {
      launched_at.assign(r.events.size(), MetricsAccumulator::kNoStep);
      for (const Flow& f : r.flows)
        if (is_launch_flow(r, f)) launched_at[f.to] = r.events[f.from].start_ns;
    }
    const auto split = collectives.transfer_start.find(r.rank);
    const std::vector<int64_t>* transfer_start =
        split == collectives.transfer_start.end() ? nullptr : &split->second;
    acc.breakdown_reads(r.rank, &r.events, transfer_start);
    for (size_t i = 0; i < r.events.size(); ++i) {
      const Event& e = r.events[i];
      const LaneKind kind = e.lane < r.lanes.size() ? r.lanes[e.lane].kind : LaneKind::other;
      const bool by_launch = rule == StepRule::launch && kind != LaneKind::host;
      acc.add_event(r.rank, kind, e, by_launch ? launched_at[i] : e.start_ns,
                    transfer_start ? (*transfer_start)[i] : e.start_ns);
    }
    for (const MemoryEvent& m : r.memory) acc.add_memory(r.rank, m);
  }
  return acc.finish();
}

}  // namespace shardscope::traces
