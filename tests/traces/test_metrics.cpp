// Metrics on hand-built traces whose answers are worked out by hand.
#include <algorithm>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <random>

#include "tests/traces/sample_traces.h"
#include "traces/metrics.h"
#include "traces/metrics_collectives.h"

using namespace shardscope::traces;
using shardscope::traces::testing::ev;

namespace {

struct OneRank {
  Trace t;
  RankTrace* r;
  uint32_t host, compute, comm, copy;
  OneRank() {
    t.meta.source = Source::simulator;
    r = &t.add_rank(0);
    host = t.add_lane(*r, "host", LaneKind::host);
    compute = t.add_lane(*r, "compute", LaneKind::compute);
    comm = t.add_lane(*r, "comm", LaneKind::comm);
    copy = t.add_lane(*r, "copy", LaneKind::copy);
  }
};

constexpr double kNsToMs = 1e-6;

}  // namespace

TEST_CASE("two partially overlapping intervals: overlap 1/2, exposed = the comm tail",
          "[metrics]") {
  OneRank o;
  ev(o.t, *o.r, o.compute, "fc", Category::compute, 0, 100);
  ev(o.t, *o.r, o.comm, "ag", Category::comm_all_gather, 50, 100);
  const Metrics m = compute_metrics(o.t);
  // COMP = [0,100), COMM = [50,150): |COMP ∩ COMM| = 50 of |COMM| = 100.
  CHECK(m.total.overlap == Approx(0.5));
  CHECK(m.total.exposed_comm_ms == Approx(50 * kNsToMs));
  CHECK(m.total.compute_ms == Approx(100 * kNsToMs));
  CHECK(m.total.comm_ms == Approx(100 * kNsToMs));
  CHECK(m.total.step_time_ms == Approx(150 * kNsToMs));
  CHECK(m.total.idle_ms == Approx(0).margin(1e-12));  // device lanes busy over [0,150)
  CHECK(m.world_size == 1);
}

TEST_CASE("exposed communication with gaps, idle between bursts", "[metrics]") {
  OneRank o;
  ev(o.t, *o.r, o.comm, "ag0", Category::comm_all_gather, 0, 40);
  ev(o.t, *o.r, o.comm, "ag1", Category::comm_all_gather, 60, 40);
  ev(o.t, *o.r, o.comm, "rs", Category::comm_reduce_scatter, 200, 100);
  ev(o.t, *o.r, o.compute, "a", Category::compute, 20, 60);
  ev(o.t, *o.r, o.compute, "b", Category::compute, 250, 150);
  const Metrics m = compute_metrics(o.t);
  // COMM = [0,40) [60,100) [200,300) = 180; COMP = [20,80) [250,400) = 210.
  // COMM ∩ COMP = [20,40) [60,80) [250,300) = 90 -> exposed 90, overlap 0.5.
  CHECK(m.total.comm_ms == Approx(180 * kNsToMs));
  CHECK(m.total.compute_ms == Approx(210 * kNsToMs));
  CHECK(m.total.exposed_comm_ms == Approx(90 * kNsToMs));
  CHECK(m.total.overlap == Approx(0.5));
  // Step [0,400); device busy [0,100) [200,400) = 300 -> idle 100.
  CHECK(m.total.step_time_ms == Approx(400 * kNsToMs));
  CHECK(m.total.idle_ms == Approx(100 * kNsToMs));
}

TEST_CASE("host lanes, sync and markers count for step time but are never busy", "[metrics]") {
  OneRank o;
  ev(o.t, *o.r, o.host, "step", Category::compute, 0, 1000);  // host work, not device
  ev(o.t, *o.r, o.compute, "k", Category::compute, 100, 100);
  ev(o.t, *o.r, o.compute, "wait", Category::sync, 200, 300);
  ev(o.t, *o.r, o.comm, "note", Category::marker, 500, 400);
  ev(o.t, *o.r, o.copy, "h2d", Category::memcpy_h2d, 600, 50);  // busy, neither COMP nor COMM
  const Metrics m = compute_metrics(o.t);
  CHECK(m.total.step_time_ms == Approx(1000 * kNsToMs));
  // COMP includes the host compute event [0,1000): categories, not lanes, make COMP.
  CHECK(m.total.compute_ms == Approx(1000 * kNsToMs));
  CHECK(m.total.comm_ms == 0);
  CHECK(m.total.overlap == 0);  // no COMM: defined as 0
  // Device busy: [100,200) + [600,650) = 150 over the device span [100,650)
  // (HTA's kernel time: host, sync and marker events do not open it) -> idle 400.
  CHECK(m.total.device_span_ms == Approx(550 * kNsToMs));
  CHECK(m.total.idle_ms == Approx(400 * kNsToMs));
  // Non-compute = busy minus COMP: both device intervals lie under the host
  // compute event [0,1000), so none.
  CHECK(m.total.non_compute_ms == 0);
}

TEST_CASE("comm with no compute is fully exposed", "[metrics]") {
  OneRank o;
  ev(o.t, *o.r, o.comm, "ar", Category::comm_all_reduce, 10, 90);
  ev(o.t, *o.r, o.comm, "p2p", Category::comm_other, 50, 100);
  const Metrics m = compute_metrics(o.t);
  CHECK(m.total.comm_ms == Approx(140 * kNsToMs));  // union [10,150)
  CHECK(m.total.exposed_comm_ms == Approx(140 * kNsToMs));
  CHECK(m.total.overlap == 0);
}

TEST_CASE("peak memory with interleaved allocations and frees on two streams", "[metrics]") {
  OneRank o;
  RankTrace& r = *o.r;
  // allocated after each: 100, 150, 50, 250, 200, 0. Reserved grows to 4 MiB.
  add_allocation(r, 10, 100, 0x1000, o.compute, MemoryCategory::activations, 2 << 20);
  add_allocation(r, 20, 50, 0x2000, o.comm, MemoryCategory::comm_buffers, 2 << 20);
  add_allocation(r, 30, -100, 0x1000, o.compute, MemoryCategory::activations, 2 << 20);
  add_allocation(r, 40, 200, 0x3000, o.comm, MemoryCategory::comm_buffers, 4 << 20);
  add_allocation(r, 50, -50, 0x2000, o.comm, MemoryCategory::comm_buffers, 4 << 20);
  add_allocation(r, 60, -200, 0x3000, o.comm, MemoryCategory::comm_buffers, 4 << 20);
  CHECK(r.memory.back().allocated == 0);
  ev(o.t, r, o.compute, "k", Category::compute, 0, 70);
  const Metrics m = compute_metrics(o.t);
  CHECK(m.total.peak_allocated_bytes == 250);
  CHECK(m.total.peak_reserved_bytes == 4 << 20);
  CHECK(m.ranks.at(0).peak_allocated_bytes == 250);
}

TEST_CASE("peak memory of a step includes what was allocated before it", "[metrics]") {
  OneRank o;
  RankTrace& r = *o.r;
  r.steps = {{1, 0, 100}, {2, 100, 200}, {3, 200, 300}};
  add_allocation(r, 10, 1000, 1, o.compute, MemoryCategory::parameters, 4096);   // step 1, kept
  add_allocation(r, 150, 500, 2, o.compute, MemoryCategory::activations, 4096);  // step 2
  add_allocation(r, 160, -500, 2, o.compute, MemoryCategory::activations, 4096);
  // step 3 has no memory records: its peak is the 1000 carried in.
  for (int s = 0; s < 3; ++s) ev(o.t, r, o.compute, "k", Category::compute, s * 100, 50);
  const Metrics m = compute_metrics(o.t);
  REQUIRE(m.steps.size() == 3);
  CHECK(m.steps[0].peak_allocated_bytes == 1000);
  CHECK(m.steps[1].peak_allocated_bytes == 1500);
  CHECK(m.steps[2].peak_allocated_bytes == 1000);
  // Median over steps 2..3 of (1500, 1000) = 1250.
  CHECK(m.total.peak_allocated_bytes == 1250);
}

TEST_CASE("median over steps 2..S: the first step is warm-up", "[metrics]") {
  OneRank o;
  RankTrace& r = *o.r;
  const int64_t durations[] = {1000, 20, 40, 30};  // step 1 is slow (warm-up)
  for (int s = 0; s < 4; ++s) {
    r.steps.push_back(Step{s + 1, s * 10'000, s * 10'000 + durations[s]});
    ev(o.t, r, o.compute, "k", Category::compute, s * 10'000, durations[s]);
  }
  Metrics m = compute_metrics(o.t);
  CHECK(m.total.step_time_ms == Approx(30 * kNsToMs));  // median(20, 40, 30)
  CHECK(m.ranks[0].steps == 4);
  REQUIRE(m.steps.size() == 4);
  CHECK_FALSE(m.steps[0].reported);
  CHECK(m.steps[1].reported);
  CHECK(m.steps[0].step_time_ms == Approx(1000 * kNsToMs));

  // Three steps: median of an even count (steps 2, 3) is the mean of the two.
  r.steps.pop_back();
  r.events.pop_back();
  m = compute_metrics(o.t);
  CHECK(m.total.step_time_ms == Approx(30 * kNsToMs));  // (20 + 40) / 2

  // One step: that step (an empty range, the last: its events' extent).
  OneRank one;
  one.r->steps.push_back(Step{7, 0, 0});
  ev(one.t, *one.r, one.compute, "k", Category::compute, 0, 1000);
  m = compute_metrics(one.t);
  CHECK(m.total.step_time_ms == Approx(1000 * kNsToMs));
  CHECK(m.steps.at(0).step == 7);
}

TEST_CASE("step membership: by start time, events before the first step are left out",
          "[metrics]") {
  OneRank o;
  RankTrace& r = *o.r;
  r.steps = {{1, 100, 100}, {2, 200, 200}};  // empty ranges: periods to the next start
  ev(o.t, r, o.compute, "before", Category::compute, 0, 50);  // in no step
  ev(o.t, r, o.compute, "s1", Category::compute, 100, 10);
  ev(o.t, r, o.compute, "s1 late", Category::compute, 190, 40);  // starts in 1, ends in 2
  ev(o.t, r, o.compute, "s2", Category::compute, 240, 500);      // the last step is open-ended
  const Metrics m = compute_metrics(o.t);
  REQUIRE(m.steps.size() == 2);
  CHECK(m.steps[0].compute_ms == Approx(50 * kNsToMs));     // s1 + s1 late
  CHECK(m.steps[1].compute_ms == Approx(500 * kNsToMs));    // s2
  CHECK(m.steps[0].step_time_ms == Approx(100 * kNsToMs));  // [100, 200): to step 2's start
  CHECK(m.steps[1].step_time_ms == Approx(540 * kNsToMs));  // [200, 740): the last, its events
  CHECK(m.total.step_time_ms == Approx(540 * kNsToMs));     // step 2 only
}

TEST_CASE("top level: max over ranks for step time and peaks, weighted mean for the rest",
          "[metrics]") {
  Trace t;
  for (int rank = 0; rank < 2; ++rank) {
    RankTrace& r = t.add_rank(rank);
    const uint32_t c = t.add_lane(r, "compute", LaneKind::compute);
    const uint32_t k = t.add_lane(r, "comm", LaneKind::comm);
    ev(t, r, c, "fc", Category::compute, 0, rank == 0 ? 100 : 300);
    ev(t, r, k, "ag", Category::comm_all_gather, 0, 100);
    add_allocation(r, 0, rank == 0 ? 700 : 500, 1, c, MemoryCategory::parameters, 1000);
  }
  Metrics m = compute_metrics(t);
  CHECK(m.total.step_time_ms == Approx(300 * kNsToMs));
  CHECK(m.total.compute_ms == Approx(200 * kNsToMs));  // mean(100, 300)
  CHECK(m.total.peak_allocated_bytes == 700);
  // Rank 1 stands for three ranks: mean = (100 + 3 * 300) / 4.
  t.ranks[1].represents = {1, 2, 3};
  m = compute_metrics(t);
  CHECK(m.total.compute_ms == Approx(250 * kNsToMs));
  CHECK(m.world_size == 4);
  CHECK(m.ranks[1].represents.size() == 3);
}

TEST_CASE("breakdowns: count, total, mean and self time with nesting on one lane", "[metrics]") {
  OneRank o;
  RankTrace& r = *o.r;
  ev(o.t, r, o.host, "forward", Category::marker, 0, 100, "h.0", "forward");
  ev(o.t, r, o.host, "fc1", Category::compute, 10, 20, "h.0", "matmul");
  ev(o.t, r, o.host, "fc2", Category::compute, 40, 20, "h.0", "matmul");
  ev(o.t, r, o.host, "inner", Category::compute, 45, 5, "h.0", "add");  // nested in fc2
  ev(o.t, r, o.compute, "gelu", Category::compute, 0, 30, "h.1");       // no op type: its name
  const Metrics m = compute_metrics(o.t);
  auto find = [](const std::vector<BreakdownRow>& rows, const std::string& key) {
    auto it =
        std::find_if(rows.begin(), rows.end(), [&](const BreakdownRow& b) { return b.key == key; });
    REQUIRE(it != rows.end());
    return *it;
  };
  const BreakdownRow fwd = find(m.by_op, "forward");
  CHECK(fwd.count == 1);
  CHECK(fwd.total_ms == Approx(100 * kNsToMs));
  CHECK(fwd.self_ms == Approx(60 * kNsToMs));  // 100 - 20 - 20 (direct children only)
  const BreakdownRow mm = find(m.by_op, "matmul");
  CHECK(mm.count == 2);
  CHECK(mm.total_ms == Approx(40 * kNsToMs));
  CHECK(mm.mean_ms == Approx(20 * kNsToMs));
  CHECK(mm.self_ms == Approx(35 * kNsToMs));  // fc2 loses 5 to "inner"
  CHECK(find(m.by_op, "gelu").count == 1);
  const BreakdownRow h0 = find(m.by_unit, "h.0");
  CHECK(h0.count == 4);
  CHECK(h0.total_ms == Approx(145 * kNsToMs));
  CHECK(find(m.by_unit, "h.1").total_ms == Approx(30 * kNsToMs));
  CHECK(find(m.by_category, "marker").count == 1);
  // Largest total first.
  CHECK(m.by_unit.front().key == "h.0");
}

TEST_CASE("the accumulator fed directly agrees with compute_metrics on the trace", "[metrics]") {
  for (int steps : {0, 1, 4}) {
    const Trace t = testing::random_trace(static_cast<uint32_t>(42 + steps), 3, steps, 400);
    const nlohmann::json expected = metrics_to_json(compute_metrics(t), -1);

    // Events and memory shuffled across ranks and lanes, steps declared first.
    // Rank 1 stands for 3: collectives are not split (a note says why).
    const CollectiveMatch collectives = match_collectives(t);
    CHECK_FALSE(collectives.split);
    MetricsAccumulator acc(t.strings);
    acc.set_comm_split(collectives.split, collectives.reason);
    acc.set_source(t.meta.source);
    acc.set_world_size(t.meta.world_size);
    struct Item {
      int32_t rank;
      LaneKind kind;
      const Event* e;
      const MemoryEvent* m;
    };
    std::vector<Item> items;
    for (const RankTrace& r : t.ranks) {
      acc.add_rank(r.rank, r.represents);
      for (const Step& s : r.steps) acc.add_step(r.rank, s);
      for (const Event& e : r.events) items.push_back({r.rank, r.lanes[e.lane].kind, &e, nullptr});
      for (const MemoryEvent& m : r.memory) items.push_back({r.rank, LaneKind::other, nullptr, &m});
    }
    std::shuffle(items.begin(), items.end(), std::mt19937(7));
    for (const Item& i : items) {
      if (i.e) acc.add_event(i.rank, i.kind, *i.e);
      if (i.m) acc.add_memory(i.rank, *i.m);
    }
    CHECK(metrics_to_json(acc.finish(), -1) == expected);

    // Streaming in time order, each step declared when the stream reaches it.
    MetricsAccumulator live(t.strings);
    live.set_comm_split(collectives.split, collectives.reason);
    live.set_source(t.meta.source);
    live.set_world_size(t.meta.world_size);
    for (const RankTrace& r : t.ranks) {
      live.add_rank(r.rank, r.represents);
      struct Timed {
        int64_t time;
        const Event* e;
        const MemoryEvent* m;
      };
      std::vector<Timed> order;
      for (const Event& e : r.events) order.push_back({e.start_ns, &e, nullptr});
      for (const MemoryEvent& m : r.memory) order.push_back({m.time_ns, nullptr, &m});
      std::stable_sort(order.begin(), order.end(),
                       [](const Timed& a, const Timed& b) { return a.time < b.time; });
      size_t next_step = 0;
      for (const Timed& i : order) {
        while (next_step < r.steps.size() && r.steps[next_step].start_ns <= i.time)
          live.add_step(r.rank, r.steps[next_step++]);
        if (i.e) live.add_event(r.rank, r.lanes[i.e->lane].kind, *i.e);
        if (i.m) live.add_memory(r.rank, *i.m);
      }
      while (next_step < r.steps.size()) live.add_step(r.rank, r.steps[next_step++]);
    }
    CHECK(metrics_to_json(live.finish(), -1) == expected);
  }
}

TEST_CASE("the accumulator refuses a step that would change earlier membership", "[metrics]") {
  MetricsAccumulator acc;
  Event e;
  e.start_ns = 500;
  e.dur_ns = 10;
  acc.add_event(0, LaneKind::compute, e);
  CHECK_THROWS_AS(acc.add_step(0, Step{1, 400, 600}), std::invalid_argument);
  acc.add_step(0, Step{1, 501, 600});
  CHECK_THROWS_AS(acc.add_step(0, Step{2, 501, 700}), std::invalid_argument);  // not after step 1
  // Broken steps are the trace's fault, not the step rule's (report names
  // --step-rule only for a StepRuleError).
  try {
    acc.add_step(0, Step{2, 501, 700});
  } catch (const StepRuleError&) {
    FAIL("a step out of order is not a step-rule error");
  } catch (const std::invalid_argument&) {
  }
  e.dur_ns = -1;
  CHECK_THROWS_AS(acc.add_event(0, LaneKind::compute, e), std::invalid_argument);
}

TEST_CASE("breakdown off: same totals, no per-event records", "[metrics]") {
  const Trace t = testing::sample_trace();
  const Metrics with = compute_metrics(t);
  const Metrics without = compute_metrics(t, MetricsOptions{false});
  CHECK(without.by_unit.empty());
  CHECK(without.by_op.empty());
  CHECK(without.total.step_time_ms == with.total.step_time_ms);
  CHECK(without.total.overlap == with.total.overlap);
  CHECK(without.total.peak_reserved_bytes == with.total.peak_reserved_bytes);
}

TEST_CASE("sample trace: metrics worked out by hand", "[metrics]") {
  const Metrics m = compute_metrics(testing::sample_trace());
  // Per step (same for both steps and ranks): the step's range, 9000 ns (its
  // events span only [0, 7020): marker at 0, memset ends at 7020).
  CHECK(m.total.step_time_ms == Approx(9000 * kNsToMs));
  // COMP = fc1 [1100,3100) + gelu [3100,3600) = 2500.
  CHECK(m.total.compute_ms == Approx(2500 * kNsToMs));
  // COMM = ag [100,1100) + rs [3000,5500) + ar [6000,6300) = 3800.
  CHECK(m.total.comm_ms == Approx(3800 * kNsToMs));
  // COMM ∩ COMP = [3000,3600) = 600 -> exposed 3200.
  CHECK(m.total.exposed_comm_ms == Approx(3200 * kNsToMs));
  CHECK(m.total.overlap == Approx(600.0 / 3800.0));
  // Device busy: copy [50,90) + [100,5500) + [6000,6300) + [7000,7020) = 40+5400+300+20
  // = 5760 over the device span [50,7020) = 6970 (the host marker at 0 and the
  // sync on compute do not count) -> idle 1210.
  CHECK(m.total.device_span_ms == Approx(6970 * kNsToMs));
  CHECK(m.total.idle_ms == Approx((6970 - 5760) * kNsToMs));
  // Non-compute = busy \ COMP = 5760 - 2500; compute + non-compute + idle = span.
  CHECK(m.total.non_compute_ms == Approx(3260 * kNsToMs));
  CHECK(m.total.compute_ms + m.total.non_compute_ms + m.total.idle_ms ==
        Approx(m.total.device_span_ms));
  // Memory: 1 MiB + 3 MiB live at once; reserved 8 MiB.
  CHECK(m.total.peak_allocated_bytes == 4 << 20);
  CHECK(m.total.peak_reserved_bytes == 8 << 20);
  // JSON contract keys.
  const nlohmann::json j = metrics_to_json(m);
  for (const char* key :
       {"source", "world_size", "step_time_ms", "peak_allocated_bytes", "peak_reserved_bytes",
        "compute_ms", "comm_ms", "exposed_comm_ms", "overlap", "idle_ms", "ranks"})
    CHECK(j.contains(key));
  CHECK(j["source"] == "simulator");
  CHECK(j["ranks"].size() == 2);
  for (const char* key : {"rank", "step_time_ms", "peak_allocated_bytes", "peak_reserved_bytes",
                          "compute_ms", "comm_ms", "exposed_comm_ms", "overlap", "idle_ms"})
    CHECK(j["ranks"][0].contains(key));
  CHECK(format_metrics(m).find("rank 1") != std::string::npos);
}

TEST_CASE("metrics_to_json with times withheld: every time field null, memory and counts kept",
          "[metrics]") {
  // What simulate --json writes for a step that ran out of memory.
  const Metrics m = compute_metrics(testing::sample_trace());
  const nlohmann::json shown = metrics_to_json(m, -1);
  const nlohmann::json j = metrics_to_json(m, -1, TimeFields::withheld);
  const char* const times[] = {"step_time_ms",    "compute_ms", "comm_ms",
                               "exposed_comm_ms", "overlap",    "idle_ms"};
  std::vector<const nlohmann::json*> values = {&j};
  for (const nlohmann::json& r : j["ranks"]) values.push_back(&r);
  for (const nlohmann::json& s : j["steps"]) values.push_back(&s);
  REQUIRE(values.size() == 1 + 2 + 2);
  for (const nlohmann::json* v : values) {
    for (const char* key : times) {
      INFO(key);
      REQUIRE(v->contains(key));
      CHECK((*v)[key].is_null());
    }
    CHECK((*v)["peak_allocated_bytes"] == 4 << 20);
    CHECK((*v)["peak_reserved_bytes"] == 8 << 20);
  }
  size_t rows = 0;
  for (const char* by : {"by_unit", "by_op", "by_category"}) {
    REQUIRE(j["breakdown"][by].size() == shown["breakdown"][by].size());
    for (size_t i = 0; i < j["breakdown"][by].size(); ++i, ++rows) {
      const nlohmann::json& row = j["breakdown"][by][i];
      CHECK(row["key"] == shown["breakdown"][by][i]["key"]);
      CHECK(row["count"] == shown["breakdown"][by][i]["count"]);
      for (const char* key : {"total_ms", "mean_ms", "self_ms"}) CHECK(row[key].is_null());
    }
  }
  CHECK(rows > 0);
  // The default shows them: the sample's step is 7020 ns.
  CHECK(shown["step_time_ms"].get<double>() == Approx(9000 * kNsToMs));
}

// A profiler-like trace whose GPU falls further behind every step: host step
// k spans [100k, 100k + 100) us and launches one 90 us kernel at its start;
// the kernel of step k starts 10k us late (10 us more each step). Step time
// is the loop's period (100 us), never host start to kernel end (100 + lag).
TEST_CASE("step time is the iteration period under a growing host-device lag", "[metrics]") {
  for (const StepRule rule : {StepRule::launch, StepRule::markers}) {
    INFO("rule " << step_rule_name(rule));
    Trace t;
    t.meta.source = Source::kineto;
    RankTrace& r = t.add_rank(0);
    const uint32_t host = t.add_lane(r, "host", LaneKind::host);
    const uint32_t gpu = t.add_lane(r, "stream 7", LaneKind::compute, 7);
    constexpr int64_t kUs = 1000;
    constexpr int kSteps = 6;
    for (int k = 0; k < kSteps; ++k) {
      const int64_t start = 100 * k * kUs;
      r.steps.push_back(Step{k + 1, start, start + 100 * kUs});
      const uint32_t launch = ev(t, r, host, "cudaLaunchKernel", Category::host, start, 5 * kUs);
      const uint32_t kernel =
          ev(t, r, gpu, "gemm", Category::compute, start + 10 * k * kUs, 90 * kUs);
      r.events[launch].correlation = r.events[kernel].correlation = static_cast<uint32_t>(k + 1);
      r.flows.push_back(Flow{launch, kernel});
    }
    MetricsOptions options;
    options.step_rule = rule;
    const Metrics m = compute_metrics(t, options);
    REQUIRE(m.ranks.size() == 1);
    const RankMetrics& rank = m.ranks[0];
    REQUIRE(rank.per_step.size() == kSteps);
    for (int k = 0; k < kSteps; ++k) {
      const StepMetrics& s = rank.per_step[static_cast<size_t>(k)];
      INFO("step " << s.step);
      CHECK(s.step_time_ms == Approx(0.100));
      // The kernel of step k (in step k under both rules: it starts 10k us
      // into the step) ends at 100k + 10k + 90 us: past the step's end by
      // 10k - 10 us.
      CHECK(s.device_span_ms == Approx(0.090));
      CHECK(s.host_device_lag_ms == Approx(0.010 * k - 0.010).margin(1e-12));
    }
    // Reported: launch 2..5 (lags 0, 10, 20, 30 us), markers 2..6 (0..40 us).
    CHECK(rank.step_time_ms == Approx(0.100));
    CHECK(m.total.step_time_ms == Approx(0.100));
    CHECK(m.total.host_device_lag_ms == Approx(rule == StepRule::launch ? 0.015 : 0.020));
  }
}

TEST_CASE("step time: an empty step range takes the distance to the next step", "[metrics]") {
  OneRank o;
  o.r->steps.push_back(Step{1, 0, 0});
  o.r->steps.push_back(Step{2, 1000, 1000});
  o.r->steps.push_back(Step{3, 2500, 2500});
  ev(o.t, *o.r, o.compute, "a", Category::compute, 0, 100);
  ev(o.t, *o.r, o.compute, "b", Category::compute, 1000, 1200);  // runs into step 3's period
  ev(o.t, *o.r, o.compute, "c", Category::compute, 2600, 300);
  const Metrics m = compute_metrics(o.t);
  const RankMetrics& r = m.ranks.at(0);
  REQUIRE(r.per_step.size() == 3);
  CHECK(r.per_step[0].step_time_ms == Approx(1000 * kNsToMs));
  CHECK(r.per_step[1].step_time_ms == Approx(1500 * kNsToMs));
  CHECK(r.per_step[1].host_device_lag_ms == Approx(-300 * kNsToMs));  // 2200 - 2500
  // The last step has no next one: its events' extent from its start.
  CHECK(r.per_step[2].step_time_ms == Approx(400 * kNsToMs));
  CHECK(r.per_step[2].host_device_lag_ms == Approx(0).margin(1e-12));
}

// The simulator streams a step added at its start (end unknown) and ends it
// when done; its trace records Step{0, 0, end}. Both give the period from 0,
// though the first event starts at 20 ns.
TEST_CASE("end_step: a streamed step ended late equals the trace's step", "[metrics]") {
  OneRank o;
  o.r->steps.push_back(Step{0, 0, 500});
  ev(o.t, *o.r, o.compute, "k", Category::compute, 20, 400);
  const Metrics from_trace = compute_metrics(o.t);
  CHECK(from_trace.total.step_time_ms == Approx(500 * kNsToMs));
  MetricsAccumulator acc(o.t.strings);
  acc.set_source(o.t.meta.source);
  acc.add_rank(0);
  acc.add_step(0, Step{0, 0, 0});
  acc.add_event(0, LaneKind::compute, o.r->events[0]);
  acc.end_step(0, 500);
  CHECK(metrics_to_json(acc.finish(), -1) == metrics_to_json(from_trace, -1));
  CHECK_THROWS_AS(acc.end_step(0, -1), std::invalid_argument);
  MetricsAccumulator launch;
  launch.set_step_rule(0, StepRule::launch);
  launch.add_step(0, Step{1, 0, 0});
  CHECK_THROWS_AS(launch.end_step(0, 10), std::invalid_argument);
}

TEST_CASE("breakdown read in place: out-of-order lanes and equal events nest as in records",
          "[metrics]") {
  OneRank o;
  RankTrace& r = *o.r;
  // Host lane out of order (a child before its parent) and two equal events
  // [200, 300) with one child [210, 230); compute lane in order.
  ev(o.t, r, o.host, "inner", Category::compute, 45, 5, "h.0", "add");
  ev(o.t, r, o.host, "fc2", Category::compute, 40, 20, "h.0", "matmul");
  ev(o.t, r, o.host, "a", Category::compute, 200, 100, "h.1", "op_a");
  ev(o.t, r, o.host, "c", Category::compute, 210, 20, "h.1", "op_c");
  ev(o.t, r, o.host, "b", Category::compute, 200, 100, "h.1", "op_b");
  ev(o.t, r, o.compute, "k0", Category::compute, 0, 30, "h.2", "kernel");
  ev(o.t, r, o.compute, "k1", Category::compute, 30, 30, "h.2", "kernel");
  const Metrics m = compute_metrics(o.t);
  auto find = [&m](const std::string& key) {
    auto it = std::find_if(m.by_op.begin(), m.by_op.end(),
                           [&](const BreakdownRow& b) { return b.key == key; });
    REQUIRE(it != m.by_op.end());
    return *it;
  };
  CHECK(find("matmul").self_ms == Approx(15 * kNsToMs));  // 20 - the nested 5
  CHECK(find("add").self_ms == Approx(5 * kNsToMs));
  CHECK(find("op_c").self_ms == Approx(20 * kNsToMs));
  // One of the equal events is the other's parent: self 0 and 100 - 20.
  const double a = find("op_a").self_ms, b = find("op_b").self_ms;
  CHECK(std::min(a, b) == Approx(0).margin(1e-12));
  CHECK(std::max(a, b) == Approx(80 * kNsToMs));
  CHECK(find("kernel").self_ms == Approx(60 * kNsToMs));

  // The same events fed to an accumulator that keeps a record each, in the
  // trace's order: the same rows, the equal events included.
  MetricsAccumulator acc(o.t.strings);
  const CollectiveMatch collectives = match_collectives(o.t);
  acc.set_comm_split(collectives.split, collectives.reason, collectives.unmatched);
  acc.set_source(o.t.meta.source);
  acc.set_world_size(o.t.meta.world_size);
  acc.add_rank(0);
  for (const Event& e : r.events) acc.add_event(0, r.lanes[e.lane].kind, e);
  CHECK(metrics_to_json(acc.finish(), -1) == metrics_to_json(m, -1));
}

TEST_CASE("breakdown_reads is refused after the rank's first event", "[metrics]") {
  OneRank o;
  ev(o.t, *o.r, o.compute, "k", Category::compute, 0, 10);
  MetricsAccumulator acc(o.t.strings);
  acc.add_event(0, LaneKind::compute, o.r->events[0]);
  CHECK_THROWS_WITH(acc.breakdown_reads(0, &o.r->events, nullptr),
                    Catch::Contains("rank 0: breakdown_reads after the rank's first event"));
  MetricsAccumulator short_of(o.t.strings);
  const std::vector<int64_t> starts(2, 0);
  CHECK_THROWS_WITH(short_of.breakdown_reads(0, &o.r->events, &starts),
                    Catch::Contains("one transfer start per event"));
}
