#include "sim/simulator.h"

#include <algorithm>
#include <cmath>

#include "sim/executor.h"
#include "sim/version.h"

namespace shardscope::sim {

using detail::Executor;

namespace {

struct RankClass {
  std::vector<GroupSpan> spans;  // per schedule group, as the class's ranks see them
  std::vector<int32_t> ranks;
};

// Partitions the world into classes of ranks whose groups have equal spans.
std::vector<RankClass> rank_classes(const plan::Schedule& s, const HardwareModel& hw) {
  std::vector<GroupSpan> own;
  own.reserve(s.groups.size());
  for (const plan::ProcessGroup& g : s.groups) own.push_back(group_span(g.ranks, hw.gpus_per_node));
  const plan::RankGroups rg = plan::rank_groups(s);
  std::vector<RankClass> classes;
  std::vector<GroupSpan> key(rg.used.size());
  auto class_of = [&](const std::vector<GroupSpan>& k) -> RankClass& {
    for (RankClass& c : classes) {
      bool same = true;
      for (size_t i = 0; i < k.size() && same; ++i)
        same = c.spans[static_cast<size_t>(rg.used[i])] == k[i];
      if (same) return c;
    }
    RankClass c;
    c.spans = own;
    for (size_t i = 0; i < k.size(); ++i) c.spans[static_cast<size_t>(rg.used[i])] = k[i];
    classes.push_back(std::move(c));
    return classes.back();
  };
  // The schedule's own rank first: its class is classes[0].
  const auto world = static_cast<int32_t>(s.world.world_size);
  for (int32_t i = 0; i < world; ++i) {
    const int32_t r = (s.rank + i) % world;
    for (size_t j = 0; j < key.size(); ++j)
      key[j] = own[static_cast<size_t>(rg.of_rank[static_cast<size_t>(r)][j])];
    class_of(key).ranks.push_back(r);
  }
  for (RankClass& c : classes) {
    std::sort(c.ranks.begin() + 1, c.ranks.end());
  }
  return classes;
}

}  // namespace

SimResult simulate(const plan::Graph& graph, const plan::UnitPlan& units,
                   const plan::Schedule& schedule, const HardwareModel& hw,
                   const SimOptions& options) {
  hw.validate();
  if (schedule.stream_roles.size() != schedule.streams.size())
    throw Error("schedule: streams and stream_roles differ in length");
  std::vector<RankClass> classes = rank_classes(schedule, hw);

  traces::Trace trace;
  traces::MetricsAccumulator acc;
  traces::Trace* t = options.record_trace ? &trace : nullptr;
  const traces::Source source = traces::Source::simulator;
  if (t) {
    t->meta.source = source;
    t->meta.model = options.model_name.empty() ? graph.model_name : options.model_name;
    t->meta.policy_json = options.policy_json;
    t->meta.hardware = options.hardware_name.empty() ? hw.name : options.hardware_name;
    t->meta.world_size = static_cast<int32_t>(schedule.world.world_size);
    t->meta.tool_versions["shardscope-sim"] = version();
    t->meta.clock_alignment = "none";
  } else {
    acc.set_source(source);
    acc.set_world_size(static_cast<int32_t>(schedule.world.world_size));
  }

  SimResult out;
  for (size_t c = 0; c < classes.size(); ++c) {
    RankClass& rc = classes[c];
    const int32_t rank = rc.ranks.front();
    std::vector<int32_t> represents = rc.ranks;
    std::sort(represents.begin(), represents.end());
    Executor ex(graph, units, schedule, hw, options, std::move(rc.spans), rank, represents, t,
                t ? nullptr : &acc);
    if (c == 0 && options.allocator_history) ex.record_allocator(options.allocator_history);
    SimResult r = ex.run();
    RankClassResult summary;
    summary.rank = rank;
    summary.represents = std::move(represents);
    summary.fits = r.fits;
    summary.step_time = r.step_time;
    summary.peak_allocated_bytes = r.peak_allocated_bytes;
    summary.peak_reserved_bytes = r.peak_reserved_bytes;
    summary.peak_requested_bytes = r.peak_requested_bytes;
    const uint64_t events = r.sim_events;
    if (c == 0) {
      out = std::move(r);
    } else {
      if (out.fits && !r.fits) {
        out.fits = false;
        out.oom_buffer = r.oom_buffer;
        out.oom_bytes = r.oom_bytes;
        out.oom_message = "rank " + std::to_string(rank) + ": " + r.oom_message;
        out.oom_rank = r.oom_rank;
        out.oom_allocated_bytes = r.oom_allocated_bytes;
        out.oom_reserved_bytes = r.oom_reserved_bytes;
      }
      out.step_time = max(out.step_time, r.step_time);
      if (r.peak_allocated_bytes > out.peak_allocated_bytes) {
        out.peak_allocated_bytes = r.peak_allocated_bytes;
        out.peak = r.peak;
      }
      out.peak_reserved_bytes = std::max(out.peak_reserved_bytes, r.peak_reserved_bytes);
      out.peak_requested_bytes = std::max(out.peak_requested_bytes, r.peak_requested_bytes);
      out.sim_events += events;
    }
    out.rank_classes.push_back(std::move(summary));
  }
  if (t) {
    out.metrics = traces::compute_metrics(trace);
    out.trace = std::move(trace);
  } else {
    out.metrics = acc.finish();
  }
  return out;
}

}  // namespace shardscope::sim
