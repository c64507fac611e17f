// Hand-built traces shared by the traces tests.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "traces/trace.h"

namespace shardscope::traces::testing {

// Adds an event with optional unit/op and returns its index.
inline uint32_t ev(Trace& t, RankTrace& r, uint32_t lane, const std::string& name, Category c,
                   int64_t start, int64_t dur, const std::string& unit = "",
                   const std::string& op = "") {
  Event& e = add_event(r, lane, t.intern(name), c, start, dur);
  e.unit = t.intern(unit);
  e.op = t.intern(op);
  return static_cast<uint32_t>(r.events.size() - 1);
}

// Two ranks of an FSDP-like step, everything the model holds: host, compute,
// comm and copy lanes, two steps, memory, flows, args, unicode and escapes.
inline Trace sample_trace() {
  Trace t;
  t.meta.source = Source::simulator;
  t.meta.model = "gpt2-tiny";
  t.meta.policy_json = R"({"flavor":"fsdp2","reshard_after_forward":true,"world_size":2})";
  t.meta.hardware = "h100-sxm";
  t.meta.world_size = 2;
  t.meta.tool_versions["shardscope"] = "0.1.0";
  t.meta.clock_alignment = "none";
  for (int32_t rank = 0; rank < 2; ++rank) {
    RankTrace& r = t.add_rank(rank);
    r.device = rank;
    r.clock_offset_ns = rank * 7;
    const uint32_t host = t.add_lane(r, "host", LaneKind::host);
    const uint32_t compute = t.add_lane(r, "compute", LaneKind::compute, 7);
    const uint32_t comm = t.add_lane(r, "comm", LaneKind::comm, 13);
    const uint32_t copy = t.add_lane(r, "h2d", LaneKind::copy, 21);
    const int64_t skew = rank * 3;
    for (int step = 0; step < 2; ++step) {
      const int64_t base = 1'000'000'000 + step * 10'000 + skew;
      r.steps.push_back(Step{step + 1, base, base + 9'000});
      ev(t, r, host, "forward", Category::marker, base, 6'000);
      const uint32_t ag =
          ev(t, r, comm, "all_gather h.0", Category::comm_all_gather, base + 100, 1'000, "h.0");
      r.events[ag].bytes = 4 << 20;
      const uint32_t fc = ev(t, r, compute, "h.0.mlp.fc1 fwd", Category::compute, base + 1'100,
                             2'000, "h.0", "matmul");
      r.events[fc].flops = 123456789;
      r.events[fc].correlation = static_cast<uint32_t>(100 + step);
      r.flows.push_back(Flow{ag, fc});
      ev(t, r, compute, "gelu \"quoted\" \\ back\tslash \xce\xbb", Category::compute, base + 3'100,
         500, "h.0", "gelu");
      const uint32_t rs = ev(t, r, comm, "reduce_scatter h.0", Category::comm_reduce_scatter,
                             base + 3'000, 2'500, "h.0");
      r.events[rs].bytes = 2 << 20;
      ev(t, r, comm, "all_reduce loss", Category::comm_all_reduce, base + 6'000, 300);
      ev(t, r, copy, "copy batch", Category::memcpy_h2d, base + 50, 40);
      ev(t, r, copy, "zero grads", Category::memset, base + 7'000, 20);
      ev(t, r, compute, "wait rs", Category::sync, base + 5'600, 100);
      add_allocation(r, base + 100, 1 << 20, 0x7f0000001000ull, comm, MemoryCategory::comm_buffers,
                     8 << 20);
      add_allocation(r, base + 1'100, 3 << 20, 0x7f0000101000ull, compute,
                     MemoryCategory::activations, 8 << 20);
      add_allocation(r, base + 3'200, -(1 << 20), 0x7f0000001000ull, comm,
                     MemoryCategory::comm_buffers, 8 << 20);
      add_allocation(r, base + 8'000, -(3 << 20), 0x7f0000101000ull, compute,
                     MemoryCategory::activations, 6 << 20);
    }
    sort_events(r);
  }
  return t;
}

// A random but valid trace for round trips and metric agreement: `ranks`
// ranks, `steps` steps each (0 = none), about `events` events per rank.
inline Trace random_trace(uint32_t seed, int ranks, int steps, int events) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Trace t;
  t.meta.source = Source::engine_cuda;
  t.meta.world_size = ranks;
  const char* units[] = {"", "h.0", "h.1", "h.2", "lm_head"};
  const char* ops[] = {"", "matmul", "attention", "layernorm", "all_gather"};
  for (int32_t rank = 0; rank < ranks; ++rank) {
    RankTrace& r = t.add_rank(rank);
    r.device = rank;
    if (rank == 1) r.represents = {1, 2, 3};
    t.add_lane(r, "host", LaneKind::host);
    t.add_lane(r, "compute", LaneKind::compute, 7);
    t.add_lane(r, "comm", LaneKind::comm, 13);
    t.add_lane(r, "copy", LaneKind::copy, 21);
    const int64_t span = 1'000'000;
    for (int s = 0; s < steps; ++s)
      r.steps.push_back(Step{s + 1, 500 + s * span, 500 + s * span + span / 2});
    for (int i = 0; i < events; ++i) {
      const auto lane = static_cast<uint32_t>(uniform(0, 3));
      const auto c = static_cast<Category>(uniform(0, kCategoryCount - 1));
      Event& e = add_event(r, lane, t.intern("op" + std::to_string(uniform(0, 9))), c,
                           uniform(0, span * (steps ? steps : 1)), uniform(0, 30'000));
      e.unit = t.intern(units[uniform(0, 4)]);
      e.op = t.intern(ops[uniform(0, 4)]);
      e.bytes = static_cast<uint64_t>(uniform(0, 1 << 20));
    }
    int64_t time = 0;
    for (int i = 0; i < events / 4; ++i) {
      time += uniform(0, 20'000);
      const int64_t bytes = uniform(-(1 << 20), 1 << 20);
      add_allocation(r, time, bytes, static_cast<uint64_t>(uniform(1, 1 << 30)),
                     static_cast<uint32_t>(uniform(1, 3)),
                     static_cast<MemoryCategory>(uniform(0, kMemoryCategoryCount - 1)),
                     uniform(0, 1 << 30));
    }
    for (int i = 0; i < events / 10; ++i)
      r.flows.push_back(Flow{static_cast<uint32_t>(uniform(0, events - 1)),
                             static_cast<uint32_t>(uniform(0, events - 1))});
  }
  return t;
}

}  // namespace shardscope::traces::testing
